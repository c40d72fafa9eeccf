"""Published H100 runs side by side: torchtitan's FSDP, TP and Float8 (December 2024).

Each row of bench/torchtitan-h100.csv (a Llama 3.1 run of torchtitan's published
benchmark, Grand Teton H100 hosts) is a runs-CSV row for `pipetwin calibrate --runs`:
FSDP2 over its D GPUs is `--zero 3` (each block all-gathered before its forward
and backward, its gradients reduce-scattered), torchtitan's tensor parallelism is
`-t T --sequence-parallel`, its selective activation checkpointing is the
per-operator policy (`--recompute op`) and its full checkpointing every block's
(`uniform:1`), and Float8 is `--precision fp8`. No gradient accumulation: one
micro-batch of the local batch a step (K = 1, M = 1).

The hardware is the dgx-h100 preset with the published host's memory (96 GB,
2.4 TB/s). The calibration's own method fits the matrix kernels' efficiency curve
and the elementwise kernels' share of the bandwidth on the single-host rows named
by --calibrate (default: Table 1's two, BF16 and Float8 on 8 GPUs; chosen before
any prediction was seen); the other rows are predicted on the fitted hardware.
Beside each figure: the predicted peak memory against the published reading
(GiB, the largest over the GPUs), and for each BF16 and Float8 pair the speed-up
FP8 gives, measured and predicted.
"""
import csv
import json
import os
import subprocess
import time

from bench.common import BenchError, ensure_build

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEQ = 8192
GIB = 2 ** 30


def rows(path):
    with open(path) as f:
        lines = [line for line in f if not line.startswith("#")]
    out = []
    for r in csv.DictReader(lines):
        for k in ("gpus", "tensor", "data", "local_batch", "table"):
            r[k] = int(r[k])
        r["tps"], r["memory_gib"] = float(r["tps"]), float(r["memory_gib"])
        if r["tensor"] * r["data"] != r["gpus"]:
            raise BenchError("%s: row %s: tensor x data is not gpus" % (path, r["name"]))
        r["batch"] = r["local_batch"] * r["data"]
        # The published throughput as a step: the global batch's tokens over all GPUs' rate.
        r["step_s"] = r["batch"] * SEQ / (r["tps"] * r["gpus"])
        out.append(r)
    return out


def write_inputs(folder):
    """Llama 3.1 8B and 70B as Hugging Face configs at 8192 tokens, and the hosts' hardware."""
    with open(os.path.join(ROOT, "examples", "llama-3-8b.json")) as f:
        base = json.load(f)
    base.update(max_position_embeddings=131072, pipetwin_seq_len=SEQ)
    big = dict(base, hidden_size=8192, intermediate_size=28672, num_attention_heads=64, num_hidden_layers=80)
    models = {}
    for name, cfg in (("8b", base), ("70b", big)):
        models[name] = os.path.join(folder, "llama-3.1-%s.json" % name)
        with open(models[name], "w") as f:
            json.dump(cfg, f, indent=1)
    hw = os.path.join(folder, "grand-teton-h100.yaml")
    with open(hw, "w") as f:
        f.write("# The dgx-h100 preset with the published hosts' H100: 96 GB of HBM2e at 2.4 TB/s.\n"
                "name: grand-teton-h100\npreset: dgx-h100\ndevice:\n  memory_gb: 96\n  memory_bandwidth_gbps: 2400\n")
    return models, hw


def options(r):
    out = ["-s", "1f1b", "-k", "1", "-m", "1", "-t", str(r["tensor"]), "-d", str(r["data"]), "--zero", "3",
           "--batch", str(r["batch"]), "--recompute", r["recompute"], "--precision", r["precision"]]
    return out + (["--sequence-parallel"] if r["tensor"] > 1 else [])


def calibrate(a, table, models, hw, fitted):
    path = os.path.join(a.out, "runs.csv")
    with open(path, "w") as f:
        f.write("name,model,hardware,tensor,pipeline,data,microbatch_size,global_batch,schedule,recompute,"
                "sequence_parallel,zero,precision,step_s,role\n")
        for r in table:
            f.write("%s,%s,%s,%d,1,%d,%d,%d,1f1b,%s,%d,3,%s,%.6f,%s\n" % (
                r["name"], models[r["model"]], hw, r["tensor"], r["data"], r["local_batch"], r["batch"],
                r["recompute"], 1 if r["tensor"] > 1 else 0, r["precision"], r["step_s"],
                "fit" if r["name"] in fitted else "predict"))
    out = os.path.join(a.out, "grand-teton-h100-fitted.yaml")
    cmd = [a.pipetwin, "calibrate", "--runs", path, "--out", out, "--json"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise BenchError("%s failed: %s" % (" ".join(cmd), (p.stderr or p.stdout).strip()))
    j = json.loads(p.stdout)
    j["wall_s"] = time.monotonic() - t0
    return j, out


def peak_memory_gib(a, r, model, hw):
    cmd = [a.pipetwin, "simulate", "--model", model, "--hardware", hw] + options(r) + ["--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise BenchError("%s failed: %s" % (" ".join(cmd), (p.stderr or p.stdout).strip()))
    s = json.loads(p.stdout)["summary"]
    return max(m["peak_bytes"] for m in s["memory_per_stage"]) / GIB, s["step_time_s"]


def report(a, table, fit, models, hw):
    by_name = {row["name"]: row for row in fit["runs"]}
    print()
    print("| run | table | GPUs | T | D | precision | published tok/s/GPU | predicted | error | memory GiB "
          "(published) | predicted | error | role |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    figures = {"rows": []}
    predicted_tps = {}
    for r in table:
        row = by_name[r["name"]]
        mem, step = peak_memory_gib(a, r, models[r["model"]], hw)
        if abs(step - row["predicted_step_s"]) > 1e-6 * step:
            raise BenchError("row %s: simulate says %.6f s, calibrate %.6f s" % (r["name"], step, row["predicted_step_s"]))
        tps = r["batch"] * SEQ / (step * r["gpus"])
        predicted_tps[r["name"]] = tps
        mem_err = mem / r["memory_gib"] - 1
        role = "fitted (left out: %+.1f%%)" % (100 * row["leave_one_out_error"]) if row["role"] == "fit" else "predicted"
        print("| %s | %d | %d | %d | %d | %s | %g | %.0f | %+.1f%% | %.1f | %.1f | %+.1f%% | %s |" % (
            r["name"], r["table"], r["gpus"], r["tensor"], r["data"], r["precision"], r["tps"], tps,
            100 * (tps / r["tps"] - 1), r["memory_gib"], mem, 100 * mem_err, role))
        figures["rows"].append({"name": r["name"], "published_tps": r["tps"], "predicted_tps": tps,
                                "step_error": row["error"], "published_memory_gib": r["memory_gib"],
                                "predicted_memory_gib": mem, "memory_error": mem_err, "role": row["role"]})
    pairs = []
    for r in table:
        if r["precision"] != "fp8":
            continue
        twin = r["name"].replace("-fp8", "-bf16")
        other = next((x for x in table if x["name"] == twin), None)
        if other is None:
            continue
        measured, predicted = r["tps"] / other["tps"], predicted_tps[r["name"]] / predicted_tps[twin]
        pairs.append({"pair": twin[:-5], "measured": measured, "predicted": predicted})
    if pairs:
        print()
        print("| pair | Float8 speed-up, published | predicted |")
        print("|---|---|---|")
        for p in pairs:
            print("| %s | %.3f | %.3f |" % (p["pair"], p["measured"], p["predicted"]))
    figures["fp8_speedups"] = pairs
    p = fit["predicted"]
    mems = sorted(abs(x["memory_error"]) for x in figures["rows"])
    print()
    print("predicted rows: step median error %.1f%%, worst %.1f%% (%d rows); memory, all rows: median %.1f%%, "
          "worst %.1f%%" % (100 * p["median_error"], 100 * p["worst_error"],
                             sum(1 for x in fit["runs"] if x["role"] == "predict"), 100 * mems[len(mems) // 2],
                             100 * mems[-1]))
    figures.update(median_error=p["median_error"], worst_error=p["worst_error"], memory_worst_error=mems[-1])
    return figures


def add_arguments(ap):
    ap.add_argument("--rows", default=os.path.join(ROOT, "bench", "torchtitan-h100.csv"))
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "torchtitan-h100"))
    ap.add_argument("--calibrate", default="8b-fsdp8-bf16,8b-fsdp8-fp8", help="rows fitted (names as in the table)")


def run(a) -> dict:
    a.pipetwin = ensure_build()
    os.makedirs(a.out, exist_ok=True)
    table = rows(a.rows)
    names = [r["name"] for r in table]
    fitted = a.calibrate.split(",")
    for n in fitted:
        if n not in names:
            raise BenchError("--calibrate names row %s, not in %s (%s)" % (n, a.rows, ", ".join(names)))
    if a.quick:  # the fitted rows and one predicted
        table = [r for r in table if r["name"] in fitted] + [next(r for r in table if r["name"] not in fitted)]
    models, hw = write_inputs(a.out)
    fit, fitted_hw = calibrate(a, table, models, hw, fitted)
    f = fit["fit"]
    print("pipetwin calibrate --runs, fitted on %s (%.1f s): max %.4f, half_flops %.3g, memory_efficiency %.4f" % (
        ", ".join(fitted), fit["wall_s"], f["max"], f["half_flops"], f["memory_efficiency"]))
    figures = report(a, table, fit, models, fitted_hw)
    figures["fit"] = {"rows": fitted, "max": f["max"], "half_flops": f["half_flops"],
                      "memory_efficiency": f["memory_efficiency"]}
    return figures
