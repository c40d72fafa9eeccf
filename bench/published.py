"""Published GPU runs through `pipetwin calibrate --runs`: the shared part of the
benchmarks that set a framework's published runs beside the twin's (torchtitan_h100,
dgxc_h100). Not a benchmark itself.

A rows file is a CSV, `#` lines comments, with the columns: name, table (where in the
source), model (a key of the benchmark's model shapes), seq (tokens a sequence), gpus,
tensor, pipeline, virtual, context, data (T x K x C x D = gpus), microbatch_size,
microbatches (a replica's per step), recompute, precision, zero, and the figure: tps
(tokens per second per GPU) or step_s; memory_gib where the source gives it; expert
(E, a mixture's expert-parallel degree; 1 where the column is absent) and expert_tensor
(1: the experts whole on each device, `--expert-tensor 1`; 0 or absent: T).
"""
import csv
import json
import os
import subprocess
import time

from bench.common import BenchError

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GIB = 2 ** 30
INTS = ("gpus", "tensor", "pipeline", "virtual", "context", "data", "microbatch_size", "microbatches", "table", "seq",
        "zero")


def rows(path):
    with open(path) as f:
        lines = [line for line in f if not line.startswith("#")]
    out = []
    for r in csv.DictReader(lines):
        for k in INTS:
            r[k] = int(r[k])
        r["expert"] = int(r.get("expert") or 1)
        r["expert_tensor"] = int(r.get("expert_tensor") or 0)
        if r["tensor"] * r["pipeline"] * r["context"] * r["data"] != r["gpus"]:
            raise BenchError("%s: row %s: tensor x pipeline x context x data is not gpus" % (path, r["name"]))
        r["batch"] = r["microbatches"] * r["microbatch_size"] * r["data"]
        tokens = r["batch"] * r["seq"]
        # A throughput as a step: the global batch's tokens over all GPUs' rate.
        if r.get("tps"):
            r["tps"] = float(r["tps"])
            r["step_s"] = tokens / (r["tps"] * r["gpus"])
        else:
            r["step_s"] = float(r["step_s"])
            r["tps"] = tokens / (r["step_s"] * r["gpus"])
        r["memory_gib"] = float(r["memory_gib"]) if r.get("memory_gib") else None
        out.append(r)
    return out


def write_models(folder, table, shapes):
    """Each (model, seq) of the table as a Hugging Face config: the shape's, at that length."""
    models = {}
    for r in table:
        key = (r["model"], r["seq"])
        if key in models:
            continue
        cfg = dict(shapes[r["model"]], max_position_embeddings=max(131072, r["seq"]), pipetwin_seq_len=r["seq"])
        models[key] = os.path.join(folder, "%s-%d.json" % key)
        with open(models[key], "w") as f:
            json.dump(cfg, f, indent=1)
    return models


def llama_shapes():
    """Llama 3.1 8B (examples/llama-3-8b.json), 70B and 405B."""
    with open(os.path.join(ROOT, "examples", "llama-3-8b.json")) as f:
        base = json.load(f)
    return {"8b": base,
            "70b": dict(base, hidden_size=8192, intermediate_size=28672, num_attention_heads=64, num_hidden_layers=80),
            "405b": dict(base, hidden_size=16384, intermediate_size=53248, num_attention_heads=128, num_hidden_layers=126)}


def schedule_of(r):
    return "interleaved-1f1b" if r["virtual"] > 1 else "1f1b"


def options(r):
    out = ["-s", schedule_of(r), "-k", str(r["pipeline"]), "-m", str(r["microbatches"]), "-t", str(r["tensor"]),
           "-c", str(r["context"]), "-d", str(r["data"]), "--batch", str(r["batch"]), "--recompute", r["recompute"],
           "--precision", r["precision"]]
    if r["virtual"] > 1:
        out += ["-v", str(r["virtual"])]
    if r["zero"]:
        out += ["--zero", str(r["zero"])]
    if r["expert"] > 1:
        out += ["-e", str(r["expert"])]
    if r["expert_tensor"]:
        out += ["--expert-tensor", str(r["expert_tensor"])]
    return out + (["--sequence-parallel"] if r["tensor"] > 1 else [])


def calibrate(a, table, models, hw, fitted, name):
    path = os.path.join(a.out, "runs.csv")
    with open(path, "w") as f:
        f.write("name,model,hardware,tensor,pipeline,data,virtual,microbatch_size,global_batch,schedule,recompute,"
                "sequence_parallel,zero,precision,context,expert,expert_tensor,step_s,role\n")
        for r in table:
            f.write("%s,%s,%s,%d,%d,%d,%d,%d,%d,%s,%s,%d,%d,%s,%d,%d,%d,%.6f,%s\n" % (
                r["name"], models[(r["model"], r["seq"])], hw, r["tensor"], r["pipeline"], r["data"], r["virtual"],
                r["microbatch_size"], r["batch"], schedule_of(r), r["recompute"], 1 if r["tensor"] > 1 else 0, r["zero"],
                r["precision"], r["context"], r["expert"], r["expert_tensor"], r["step_s"], "fit" if r["name"] in fitted else "predict"))
    out = os.path.join(a.out, name + "-fitted.yaml")
    return calibrate_runs(a.pipetwin, path, out, a.jobs, getattr(a, "fit_attention", False)), out


def calibrate_runs(pipetwin, runs_csv, out, jobs, fit_attention=False):
    """`pipetwin calibrate --runs RUNS_CSV --out OUT --json` (and --fit-attention): its JSON, with its
    wall time (wall_s)."""
    cmd = [pipetwin, "calibrate", "--runs", runs_csv, "--out", out, "--jobs", str(jobs), "--json"]
    if fit_attention:
        cmd.append("--fit-attention")
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise BenchError("%s failed: %s" % (" ".join(cmd), (p.stderr or p.stdout).strip()))
    j = json.loads(p.stdout)
    j["wall_s"] = time.monotonic() - t0
    return j


def simulated(a, r, model, hw):
    """The row on `hw`: its step and its peak memory (GiB) over the ranks (a rank's stages
    together where it holds several), else over the stages."""
    cmd = [a.pipetwin, "simulate", "--model", model, "--hardware", hw] + options(r) + ["--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise BenchError("%s failed: %s" % (" ".join(cmd), (p.stderr or p.stdout).strip()))
    s = json.loads(p.stdout)["summary"]
    peaks = s.get("memory_per_rank") or s["memory_per_stage"]
    return s["step_time_s"], max(m["peak_bytes"] for m in peaks) / GIB


def fp8_pairs(table, predicted_tps):
    """Each row named NAME-fp8 beside NAME-bf16: the speed-up FP8 gives, published and predicted."""
    pairs = []
    for r in table:
        if not r["name"].endswith("-fp8"):
            continue
        twin = r["name"][:-4] + "-bf16"
        if not any(x["name"] == twin for x in table):
            continue
        other = next(x for x in table if x["name"] == twin)
        pairs.append({"pair": twin[:-5], "measured": r["tps"] / other["tps"],
                      "predicted": predicted_tps[r["name"]] / predicted_tps[twin]})
    return pairs


def report(a, table, fit, models, hw):
    by_name = {row["name"]: row for row in fit["runs"]}
    print()
    print("| run | table | tokens | GPUs | T | K | V | C | E | D | precision | published tok/s/GPU | predicted | error | "
          "memory GiB (published) | predicted | role |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    figures = {"rows": []}
    predicted_tps = {}
    for r in table:
        row = by_name[r["name"]]
        step, mem = simulated(a, r, models[(r["model"], r["seq"])], hw)
        # calibrate keeps each run's partition from the hardware the fit starts
        # from; simulate partitions again on the fitted one, which can move a
        # layer between stages (0.15% on Qwen3-235B's 32 stages): the same
        # figure to 0.5%.
        if abs(step - row["predicted_step_s"]) > 5e-3 * step:
            raise BenchError("row %s: simulate says %.6f s, calibrate %.6f s" % (r["name"], step, row["predicted_step_s"]))
        tps = r["batch"] * r["seq"] / (step * r["gpus"])
        predicted_tps[r["name"]] = tps
        mem_err = mem / r["memory_gib"] - 1 if r["memory_gib"] else None
        role = "fitted (left out: %+.1f%%)" % (100 * row["leave_one_out_error"]) if row["role"] == "fit" else "predicted"
        print("| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s | %.0f | %.0f | %+.1f%% | %s | %.1f%s | %s |" % (
            r["name"], r["table"], r["seq"], r["gpus"], r["tensor"], r["pipeline"], r["virtual"], r["context"],
            r["expert"], r["data"],
            r["precision"], r["tps"], tps, 100 * (tps / r["tps"] - 1),
            "%.1f" % r["memory_gib"] if r["memory_gib"] else "-", mem,
            " (%+.1f%%)" % (100 * mem_err) if mem_err is not None else "", role))
        figures["rows"].append({"name": r["name"], "published_tps": r["tps"], "predicted_tps": tps,
                                "step_error": row["error"], "published_memory_gib": r["memory_gib"],
                                "predicted_memory_gib": mem, "memory_error": mem_err, "role": row["role"]})
    pairs = fp8_pairs(table, predicted_tps)
    if pairs:
        print()
        print("| pair | FP8 speed-up, published | predicted |")
        print("|---|---|---|")
        for p in pairs:
            print("| %s | %.3f | %.3f |" % (p["pair"], p["measured"], p["predicted"]))
    figures["fp8_speedups"] = pairs
    p = fit["predicted"]
    mems = sorted(abs(x["memory_error"]) for x in figures["rows"] if x["memory_error"] is not None)
    print()
    print("predicted rows: step median error %.1f%%, worst %.1f%% (%d rows)%s" % (
        100 * p["median_error"], 100 * p["worst_error"], sum(1 for x in fit["runs"] if x["role"] == "predict"),
        "; memory, all rows: median %.1f%%, worst %.1f%%" % (100 * mems[len(mems) // 2], 100 * mems[-1]) if mems else ""))
    figures.update(median_error=p["median_error"], worst_error=p["worst_error"],
                   memory_worst_error=mems[-1] if mems else None)
    return figures


def add_arguments(ap, rows_file, out, fitted):
    ap.add_argument("--rows", default=os.path.join(ROOT, "bench", rows_file))
    ap.add_argument("--out", default=os.path.join(ROOT, "out", out))
    ap.add_argument("--calibrate", default=fitted, help="rows fitted (names as in the table)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--attention", metavar="FILE", default=None,
                    help="a hardware YAML whose device.attention (a fused attention kernel's rates by sequence "
                         "length, e.g. examples/h100-flash2.yaml) the bench's hardware takes")
    ap.add_argument("--fit-attention", action="store_true",
                    help="with --attention: calibrate --runs --fit-attention, one factor on those rates fitted too")


def with_attention(hardware_yaml, path):
    """`hardware_yaml` with the device.attention block of the hardware file `path`."""
    with open(path) as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.rstrip() == "  attention:"), None)
    if start is None:
        raise BenchError("--attention %s: no device.attention block (an 'attention:' key under 'device:')" % path)
    end = start + 1
    while end < len(lines) and lines[end].startswith("    "):
        end += 1
    block = "\n".join(lines[start:end]) + "\n"
    if "\ndevice:\n" in hardware_yaml:
        return hardware_yaml.replace("\ndevice:\n", "\ndevice:\n" + block, 1)
    return hardware_yaml + "device:\n" + block


def run_benchmark(a, name, hardware_yaml, shapes):
    """The rows fitted (--calibrate) and predicted, on the hardware file `hardware_yaml` writes."""
    os.makedirs(a.out, exist_ok=True)
    if getattr(a, "attention", None):
        hardware_yaml = with_attention(hardware_yaml, a.attention)
    elif getattr(a, "fit_attention", False):
        raise BenchError("--fit-attention fits the rates --attention FILE gives: give both")
    table = rows(a.rows)
    names = [r["name"] for r in table]
    fitted = a.calibrate.split(",")
    for n in fitted:
        if n not in names:
            raise BenchError("--calibrate names row %s, not in %s (%s)" % (n, a.rows, ", ".join(names)))
    if a.quick:  # the fitted rows and one predicted
        table = [r for r in table if r["name"] in fitted] + [next(r for r in table if r["name"] not in fitted)]
    models = write_models(a.out, table, shapes)
    hw = os.path.join(a.out, name + ".yaml")
    with open(hw, "w") as f:
        f.write(hardware_yaml)
    fit, fitted_hw = calibrate(a, table, models, hw, fitted, name)
    f = fit["fit"]
    print("pipetwin calibrate --runs, fitted on %s (%.1f s): max %.4f, half_flops %.3g, memory_efficiency %.4f%s" % (
        ", ".join(fitted), fit["wall_s"], f["max"], f["half_flops"], f["memory_efficiency"],
        ", attention rates x %.4f" % f["attention_scale"] if f.get("attention_scale") else ""))
    figures = report(a, table, fit, models, fitted_hw)
    figures["fit"] = {"rows": fitted, "max": f["max"], "half_flops": f["half_flops"],
                      "memory_efficiency": f["memory_efficiency"]}
    figures["attention"] = getattr(a, "attention", None)
    figures["fit"]["attention_scale"] = f.get("attention_scale", 0)
    return figures
