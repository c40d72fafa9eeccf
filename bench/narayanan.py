"""Published GPU runs side by side: Narayanan et al. (SC'21), Table 1.

Each row of bench/narayanan-sc21.csv (a GPT trained on Selene with tensor
parallelism T, a pipeline of K stages and D = GPUs / (T K) data-parallel
replicas, full recompute, interleaved 1F1B) is simulated by `pipetwin
simulate` on the `selene` preset, and the predicted teraFLOP/s per GPU (the
paper's Appendix formula over the predicted step time) is set beside the
paper's.

Calibration is `pipetwin calibrate --runs` (twin/calibrate_runs.hpp): the
table is written as a runs CSV (each row's configuration and the paper's
TFLOP/s, counted by the paper's formula), the A100's efficiency curve eff(w)
= max · w / (w + half) and the share of its memory bandwidth the elementwise
kernels achieve (memory_efficiency) are fitted on the rows named by
--calibrate (default the 1.7 B, 18.4 B and 145.6 B rows: the smallest model
and two spread over the sizes, chosen before any prediction was seen), and
the other rows are predicted with them. Every figure printed comes from a
simulation with the fitted values themselves.

Recompute is the paper's: Megatron-LM's --checkpoint-activations of 2021
checkpointed each transformer layer's input and re-ran one layer at a time in
the backward, never the output head (`--recompute uniform:1`); --recompute
full models torchgpipe's whole-stage checkpoint instead.

The models are the paper's as it ran them in 2021: GPT blocks (GELU,
LayerNorm, learned positions, biases, dropout) without flash attention (the
scores materialized by Megatron-LM's fused softmax) and without sequence
parallelism (it came in 2022), and with its runtime's blocking pipeline
sends: Megatron-LM's p2p `_communicate` of 2021 waits for every request it
posts (and synchronizes the device) before the next computation, so the
hardware files say `blocking_sends: true`.

A row's micro-batch size b and V (stages per rank) are the paper's
unpublished choices: for each row the twin takes the (b, V) it predicts
fastest with the preset's own curve, before calibrating (what `pipetwin plan`
would answer), among b in {1, 2, 4} and, where K > 1, the interleavings the
paper ran (V > 1 dividing the layers per rank, as Megatron-LM requires).
Which (b, V) fit depends on the recompute's memory: --shapes-recompute
chooses them under another recompute than the runs are predicted with.
"""
import concurrent.futures
import csv
import json
import os
import subprocess
import time

from bench.common import BenchError, ensure_build
from bench.published import calibrate_runs
from stats import median

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEQ, VOCAB = 2048, 51200


def rows(path):
    with open(path) as f:
        lines = [line for line in f if not line.startswith("#")]
    out = []
    for r in csv.DictReader(lines):
        t, k, n = int(r["tensor"]), int(r["pipeline"]), int(r["gpus"])
        out.append({
            "name": r["params_b"] + "B", "heads": int(r["heads"]), "h": int(r["hidden"]), "l": int(r["layers"]),
            "t": t, "k": k, "d": n // (t * k), "gpus": n, "batch": int(r["batch"]),
            "paper": float(r["achieved_tflops"]),
        })
    return out


def paper_flops(r):
    """FLOPs of one iteration, Narayanan et al.'s Appendix (full recompute: 4 forward passes' worth)."""
    B, s, l, h, V = r["batch"], SEQ, r["l"], r["h"], VOCAB
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def write_model(r, folder, flash=False):
    path = os.path.join(folder, "gpt-%s.yaml" % r["name"])
    with open(path, "w") as f:
        f.write("# Narayanan et al. (SC'21), Table 1: the %s-parameter GPT\n" % r["name"])
        f.write("family: llm\nname: gpt-%s\nlayers: %d\nhidden: %d\nffn_hidden: %d\nheads: %d\n"
                "seq_len: %d\nvocab: %d\nmlp: gelu\nnorm: layernorm\npositions: learned\n"
                "tied_embeddings: true\nbias: true\ndropout: true\nflash_attention: %s\nprecision: bf16\n"
                % (r["name"], r["l"], r["h"], 4 * r["h"], r["heads"], SEQ, VOCAB, "true" if flash else "false"))
    return path


BLOCKING_SENDS = True  # main() sets it from --posted-sends


RECOMPUTE = "uniform:1"  # main() sets it from --recompute


def simulate(pipetwin, model, hardware, r, b, v, sp=False, recompute=None):
    m = r["batch"] // (r["d"] * b)
    schedule = "interleaved-1f1b" if v > 1 else "1f1b"
    cmd = [pipetwin, "simulate", "--model", model, "--hardware", hardware, "-s", schedule, "-k", str(r["k"]),
           "-m", str(m), "-t", str(r["t"]), "-d", str(r["d"]), "--batch", str(r["batch"]), "--recompute", recompute or RECOMPUTE,
           "--json"]
    if v > 1:
        cmd += ["-v", str(v)]
    if sp and r["t"] > 1:
        cmd += ["--sequence-parallel"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1] if (p.stderr or p.stdout).strip() else "failed"}
    j = json.loads(p.stdout)
    s = j["summary"]
    return {"step": s["step_time_s"], "fits": s["fits"], "engine": s["engine"], "wall": wall,
            "actions": j.get("simulated_actions", 0), "m": m}


def choices(r):
    """The (b, V) a row may take: b in {1, 2, 4}; V, where K > 1, the interleaving the paper
    ran, each stage holding the same number of layers (V divides layers / K, Megatron's rule;
    V > 1) and M a multiple of K (its interleaved schedule's)."""
    out = []
    for b in (1, 2, 4):
        if r["batch"] % (r["d"] * b):
            continue
        m = r["batch"] // (r["d"] * b)
        per_rank = r["l"] // r["k"] if r["l"] % r["k"] == 0 else 0
        vs = [v for v in range(2, per_rank + 1) if per_rank % v == 0] if r["k"] > 1 else [1]
        for v in vs:
            if v > 1 and m % r["k"]:
                continue
            out.append((b, v))
    return out


def tflops(r, step):
    return paper_flops(r) / step / r["gpus"] / 1e12


class Bench:
    def __init__(self, args, table):
        self.a, self.table = args, table
        self.models = {r["name"]: write_model(r, args.out, args.flash_attention) for r in table}
        self.preset_hw = os.path.join(args.out, "selene-preset.yaml")
        with open(self.preset_hw, "w") as f:
            f.write("preset: selene\ndevice:\n  blocking_sends: %s\n" % ("true" if BLOCKING_SENDS else "false"))
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)

    def run_all(self, jobs, recompute=None):
        futures = [self.pool.submit(simulate, self.a.pipetwin, self.models[r["name"]], hw, r, b, v,
                                    self.a.sequence_parallel, recompute)
                   for (r, hw, b, v) in jobs]
        return [f.result() for f in futures]

    def shapes(self):
        """Each row's (b, V): the fastest the preset's own curve predicts, among those that fit."""
        jobs = [(r, self.preset_hw, b, v) for r in self.table for (b, v) in choices(r)]
        best = {}
        for (r, _, b, v), res in zip(jobs, self.run_all(jobs, self.a.shapes_recompute)):
            if "error" in res or not res["fits"]:
                continue
            if r["name"] not in best or res["step"] < best[r["name"]][2]:
                best[r["name"]] = (b, v, res["step"])
        for r in self.table:
            if r["name"] not in best:
                raise BenchError("no micro-batch size and V of row %s fits in memory" % r["name"])
        return best

    def fit(self, fitted, best):
        """`pipetwin calibrate --runs` on the table, the rows `fitted` fitted: its JSON."""
        path = os.path.join(self.a.out, "runs.csv")
        with open(path, "w") as f:
            f.write("name,model,hardware,tensor,pipeline,data,virtual,microbatch_size,global_batch,schedule,recompute,"
                    "sequence_parallel,tflops_per_gpu,formula,role\n")
            for r in self.table:
                b, v, _ = best[r["name"]]
                f.write("%s,%s,%s,%d,%d,%d,%d,%d,%d,%s,%s,%d,%g,megatron,%s\n" % (
                    r["name"], self.models[r["name"]], self.preset_hw, r["t"], r["k"], r["d"], v, b, r["batch"],
                    "interleaved-1f1b" if v > 1 else "1f1b", RECOMPUTE, 1 if self.a.sequence_parallel and r["t"] > 1 else 0,
                    r["paper"], "fit" if r["name"] in fitted else "predict"))
        return calibrate_runs(self.a.pipetwin, path, os.path.join(self.a.out, "selene-fitted.yaml"), self.a.jobs)


def report(table, fit, best):
    print()
    print("| model | T | K | D | GPUs | batch | b | V | paper TFLOP/s | predicted | error | role | engine |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    by_name = {row["name"]: row for row in fit["runs"]}
    figures = {"rows": []}
    for r in table:
        row = by_name[r["name"]]
        print("| %s | %d | %d | %d | %d | %d | %d | %d | %g | %.1f | %+.1f%% | %s | %s |" % (
            r["name"], r["t"], r["k"], r["d"], r["gpus"], r["batch"], best[r["name"]][0], best[r["name"]][1],
            r["paper"], row["predicted_tflops_per_gpu"], 100 * row["error"],
            "fitted (left out: %+.1f%%)" % (100 * row["leave_one_out_error"]) if row["role"] == "fit" else "predicted",
            row["engine"]))
        figures["rows"].append({"name": r["name"], "paper_tflops": r["paper"],
                                "predicted_tflops": row["predicted_tflops_per_gpu"], "error": row["error"],
                                "role": row["role"], "b": best[r["name"]][0], "v": best[r["name"]][1]})
    p = fit["predicted"]
    print()
    print("predicted rows: median error %.1f%%, worst %.1f%% (%d rows)" % (
        100 * p["median_error"], 100 * p["worst_error"], sum(1 for x in fit["runs"] if x["role"] == "predict")))
    figures.update(median_error=p["median_error"], worst_error=p["worst_error"])
    return figures


def add_arguments(ap):
    ap.add_argument("--rows", default=os.path.join(ROOT, "bench", "narayanan-sc21.csv"))
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "narayanan"))
    ap.add_argument("--calibrate", default="1.7B,18.4B,145.6B", help="rows fitted (names as in the table)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--flash-attention", action="store_true",
                    help="model flash attention (the paper's runs of 2021 materialized the scores)")
    ap.add_argument("--sequence-parallel", action="store_true",
                    help="split the norms and dropouts over T (the paper's runs of 2021 did not)")
    ap.add_argument("--recompute", default="uniform:1",
                    help="the runs' recompute (the paper's: each layer's input kept, one re-run at a time)")
    ap.add_argument("--shapes-recompute", default=None,
                    help="the recompute the (b, V) of each row are chosen under (default: --recompute's); b is the "
                         "paper's unpublished choice, and a recompute that frees memory lets larger ones fit")
    ap.add_argument("--posted-sends", action="store_true",
                    help="let a pipeline send fly while its sender goes on (Megatron-LM of 2021 waited for each)")


def run(a) -> dict:
    a.pipetwin = ensure_build()
    global BLOCKING_SENDS, RECOMPUTE
    BLOCKING_SENDS = not a.posted_sends
    RECOMPUTE = a.recompute
    os.makedirs(a.out, exist_ok=True)
    table = rows(a.rows)
    if a.quick:  # the two smallest rows, the first fitted
        table = table[:2]
        a.calibrate = table[0]["name"]
    names = [r["name"] for r in table]
    fitted = a.calibrate.split(",")
    for n in fitted:
        if n not in names:
            raise BenchError("--calibrate names row %s, not in %s (%s)" % (n, a.rows, ", ".join(names)))
    bench = Bench(a, table)
    best = bench.shapes()
    print("shapes (the preset's fastest that fit): " +
          ", ".join("%s b=%d V=%d" % (n, best[n][0], best[n][1]) for n in names))
    fit = bench.fit(fitted, best)
    f = fit["fit"]
    print("pipetwin calibrate --runs, fitted on %s (%.0f s, %d simulations): max %.4f, half_flops %.3g, "
          "memory_efficiency %.4f" % (", ".join(fitted), fit["wall_s"], fit["predictions"], f["max"], f["half_flops"],
                                      f["memory_efficiency"]))
    figures = report(table, fit, best)
    figures["fit"] = {"rows": fitted, "max": f["max"], "half_flops": f["half_flops"],
                      "memory_efficiency": f["memory_efficiency"], "recompute": a.recompute,
                      "leave_one_out": fit["leave_one_out"]}
    return figures

