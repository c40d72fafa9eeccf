"""Shared helpers of the plots/ scripts: reading the files the pipetwin CLI
writes (Chrome traces, run/simulate JSON summaries, sweep CSVs), the colours
of the action kinds, clear one-line errors, and atomic output (every file is
written to a temporary in its folder and renamed, so none is ever half written).

Nothing here imports pyplot: the scripts select the Agg backend first.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
from dataclasses import dataclass

from stats import median

# --- errors -----------------------------------------------------------------


class PlotError(Exception):
    """Bad or missing input: one line, naming the file."""


def prog_name(script: str) -> str:
    return os.environ.get("PIPETWIN_PLOT_PROG") or os.path.basename(script)


def run_main(script: str, main) -> None:
    """Runs main(argv); a PlotError becomes one line on stderr and exit 1."""
    try:
        main(sys.argv[1:])
    except PlotError as e:
        print(f"{prog_name(script)}: error: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:  # an output that cannot be written (read-only, full, not a folder): the user's to fix
        where = f"{e.filename}: " if e.filename else ""
        print(f"{prog_name(script)}: error: {where}cannot write ({e.strerror or e})", file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # a bug: one line too, never a traceback (exit 3, like pipetwin's internal errors)
        print(f"{prog_name(script)}: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(3)


def parser(script: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog_name(script), description=description)
    p.add_argument("--out", "-o", required=True, help="output prefix: writes PREFIX.png and PREFIX.svg")
    p.add_argument("--title", help="replace the figure's title")
    return p


# --- reading files ----------------------------------------------------------


def _not_json(constant: str):
    raise ValueError(f"{constant} is not a JSON number")


def load_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise PlotError(f"{path}: no such file") from None
    except OSError as e:
        raise PlotError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise PlotError(f"{path}: not UTF-8 text (byte \\x{e.object[e.start]:02x} at offset {e.start})") from None
    try:
        doc = json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as e:
        raise PlotError(f"{path}: not JSON (invalid or truncated at line {e.lineno}: {e.msg})") from None
    except ValueError as e:
        raise PlotError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise PlotError(f"{path}: expected a JSON object (a trace or a pipetwin summary)")
    return doc


OPS = ("F", "B", "I", "W", "R", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "REDUCE_GRAD", "STEP", "UNSHARD", "RESHARD")
COMPUTE_OPS = ("F", "B", "I", "W", "R")  # what counts as busy, as in schedule::Timeline::busy
_ACTION = re.compile(r"^(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|REDUCE_GRAD|STEP|UNSHARD|RESHARD|F|B|I|W|R)(\d*)$")


@dataclass(frozen=True)
class Action:
    rank: int
    op: str
    stage: int
    microbatch: int | None
    start: float  # seconds
    duration: float  # seconds

    @property
    def end(self) -> float:
        return self.start + self.duration

    @property
    def name(self) -> str:
        return f"{self.stage}{self.op}{'' if self.microbatch is None else self.microbatch}"


class TraceMeta:
    """A trace's otherData (or a `run`/`simulate` summary), read in one place:
    the fields schedule/trace_metadata.hpp writes and calibrate and compare
    read. Missing fields read as empty."""

    def __init__(self, meta: dict):
        self.raw = meta if isinstance(meta, dict) else {}

    def _text(self, key: str) -> str:
        value = self.raw.get(key)
        return value if isinstance(value, str) else ""

    @property
    def producer(self) -> str:  # "pipetwin run", "pipetwin simulate"
        return self._text("producer")

    @property
    def device(self) -> str:  # run's --device
        return self._text("device")

    @property
    def engine(self) -> str:  # the summary's engine: "simgrid 3.32", "fast critical path", "measured"
        engine = (self.raw.get("summary") or {}).get("engine", "")
        return engine if isinstance(engine, str) else ""

    @property
    def program(self) -> str:  # the Program's text form ("" in older traces)
        return self._text("program")

    def configuration(self) -> dict:
        """The fields two files must share to describe the same configuration."""
        return {f: self.raw[f] for f in CONFIG_FIELDS if f in self.raw}

    def describe(self) -> str:
        return describe_config(self.raw)

    def recorded_bubble(self) -> tuple[float, int] | None:
        return recorded_bubble(self.raw)

    @property
    def host_cores(self) -> int | None:
        """The cores of the host a measured run's ranks ran on (the fewest, over
        its ranks' measured.ranks[].host_cores); None where not recorded."""
        measured = self.raw.get("measured")
        ranks = measured.get("ranks") if isinstance(measured, dict) else None
        cores = [r.get("host_cores") for r in ranks if isinstance(r, dict)] if isinstance(ranks, list) else []
        cores = [c for c in cores if isinstance(c, int) and not isinstance(c, bool) and c > 0]
        return min(cores) if cores else None


@dataclass
class Trace:
    path: str
    meta: dict  # otherData
    actions: list[Action]

    @property
    def info(self) -> TraceMeta:
        return TraceMeta(self.meta)

    @property
    def ranks(self) -> int:
        return 1 + max((a.rank for a in self.actions), default=-1)

    def step_time(self) -> float:
        """The makespan, as schedule::Timeline::makespan: the last end."""
        return max((a.end for a in self.actions), default=0.0)

    def busy(self, rank: int) -> float:
        return sum(a.duration for a in self.actions if a.rank == rank and a.op in COMPUTE_OPS)

    def bubble(self) -> float:
        """Mean idle share of the ranks, as schedule::Timeline::bubble_fraction."""
        span, k = self.step_time(), self.ranks
        if k == 0 or span <= 0:
            return 0.0
        return sum(1.0 - self.busy(r) / span for r in range(k)) / k


def parse_trace(doc: dict, path: str) -> Trace:
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise PlotError(f"{path}: not a Chrome trace (no 'traceEvents' list)")
    meta = doc.get("otherData")
    if not isinstance(meta, dict):
        meta = {}
    actions = []
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        where = f"{path}: traceEvents[{i}]"
        name, pid, ts, dur = e.get("name"), e.get("pid"), e.get("ts"), e.get("dur")
        if not isinstance(pid, int) or pid < 0:
            raise PlotError(f"{where}: field 'pid' must be a rank (a non-negative integer)")
        if (not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or isinstance(ts, bool)
                or isinstance(dur, bool) or not math.isfinite(ts) or not math.isfinite(dur) or dur < 0):
            raise PlotError(f"{where}: fields 'ts' and 'dur' must be finite numbers, 'dur' not negative")
        m = _ACTION.match(name) if isinstance(name, str) else None
        if not m:
            raise PlotError(f"{where}: field 'name' must be an action such as 1F3, got {name!r}")
        actions.append(Action(pid, m.group(2), int(m.group(1)), int(m.group(3)) if m.group(3) else None,
                              ts / 1e6, dur / 1e6))
    if not actions:
        raise PlotError(f"{path}: the trace holds no action (no \"ph\":\"X\" event)")
    return Trace(path, meta, actions)


def load_trace(path: str) -> Trace:
    return parse_trace(load_json(path), path)


def load_summary(path: str) -> dict:
    """A trace's otherData or a `simulate/run --json` (or run --summary) document,
    as one dict holding the configuration, 'summary' and, if measured, 'measured'.
    A trace's actions are kept under '_trace'."""
    doc = load_json(path)
    if "traceEvents" in doc:
        trace = parse_trace(doc, path)
        meta = dict(trace.meta)
        meta["_trace"] = trace
        return meta
    if "summary" not in doc:
        raise PlotError(f"{path}: neither a trace nor a pipetwin summary (no 'traceEvents', no 'summary')")
    return doc


# The fields two files must share to describe the same configuration
# (schedule::configuration_fields(), which compare checks: the same ones).
CONFIG_FIELDS = ("model", "schedule", "ranks", "stages_per_rank", "microbatches", "microbatch_size", "recompute",
                 "partition")


def check_same_configuration(a: dict, a_path: str, b: dict, b_path: str) -> None:
    for field in CONFIG_FIELDS:
        if field not in a and field not in b:
            continue
        if field not in a or field not in b:
            lacking, having = (a_path, b_path) if field not in a else (b_path, a_path)
            raise PlotError(f"{lacking}: no field '{field}' ({having} has it): "
                            "cannot check that the files describe the same configuration")
        if a[field] != b[field]:
            raise PlotError(f"{b_path}: field '{field}' is {json.dumps(b[field])} but {a_path} has "
                            f"{json.dumps(a[field])}: the files describe different configurations")


# Sweep CSV (cli/cmd_sweep.cpp).
SWEEP_COLUMNS = ("schedule", "recompute", "ranks", "virtual", "microbatches", "batch", "status", "step_time_s",
                 "throughput_samples_per_s", "bubble_fraction", "max_stage_memory_gb", "engine", "reason")


def load_sweep(path: str) -> list[dict]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in SWEEP_COLUMNS if c not in header]
            if missing:
                raise PlotError(f"{path}: not a sweep CSV (no column '{missing[0]}'; "
                                "expected the header pipetwin sweep writes)")
            rows = []
            for line, raw in enumerate(reader, start=2):
                row = dict(raw)
                try:
                    for c in ("ranks", "virtual", "microbatches"):
                        row[c] = int(raw[c])
                    row["batch"] = float(raw["batch"])
                    for c in ("step_time_s", "throughput_samples_per_s", "bubble_fraction", "max_stage_memory_gb"):
                        row[c] = float(raw[c]) if raw[c] not in ("", None) else None
                except (TypeError, ValueError):
                    raise PlotError(f"{path}:{line}: not a sweep row (a number field does not parse)") from None
                row["microbatch_size"] = row["batch"] / row["microbatches"] / int(raw.get("data") or 1)
                row["_line"] = line
                rows.append(row)
    except FileNotFoundError:
        raise PlotError(f"{path}: no such file") from None
    except OSError as e:
        raise PlotError(f"{path}: cannot read ({e.strerror})") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise PlotError(f"{path}: not a sweep CSV ({e})") from None
    if not rows:
        raise PlotError(f"{path}: the sweep holds no row")
    return rows


@dataclass
class Selection:
    schedule: str
    recompute: str
    microbatch_size: float | None  # None when the rows are chosen by batch
    rows: list[dict]
    batch: float | None = None

    def describe(self) -> str:
        if self.microbatch_size is None:
            return f"{self.schedule}, recompute {self.recompute}, batch {self.batch:g}"
        return f"{self.schedule}, recompute {self.recompute}, micro-batch size {self.microbatch_size:g}"


def select_rows(rows: list[dict], path: str, schedule: str | None = None, recompute: str | None = None,
                microbatch_size: float | None = None, batch: float | None = None) -> Selection:
    """One schedule x recompute x micro-batch size of a sweep (by default the
    first of each in the file), with one row per (K, M). With `batch`, the
    rows of that mini-batch instead (a sweep run with --batch: the
    micro-batch size is batch/M and varies with M)."""
    if batch is not None and microbatch_size is not None:
        raise PlotError("choose the rows by micro-batch size or by batch, not both")
    def pick(column, wanted, pool):
        present = list(dict.fromkeys(r[column] for r in pool))
        if wanted is None:
            return present[0]
        if wanted not in present:
            shown = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in present)
            raise PlotError(f"{path}: no row with {column} {wanted:g} (it holds {shown})" if isinstance(wanted, float)
                            else f"{path}: no row with {column} '{wanted}' (it holds {shown})")
        return wanted

    s = pick("schedule", schedule, rows)
    pool = [r for r in rows if r["schedule"] == s]
    rc = pick("recompute", recompute, pool)
    pool = [r for r in pool if r["recompute"] == rc]
    if batch is not None:
        n = pick("batch", float(batch), pool)
        pool = [r for r in pool if r["batch"] == n]
        b = None
    else:
        b = pick("microbatch_size", None if microbatch_size is None else float(microbatch_size), pool)
        pool = [r for r in pool if r["microbatch_size"] == b]
    seen = {}
    for r in pool:
        key = (r["ranks"], r["microbatches"])
        if key in seen:
            raise PlotError(f"{path}:{r['_line']}: a second row for {s} K={key[0]} M={key[1]} "
                            f"(first at line {seen[key]})")
        seen[key] = r["_line"]
    return Selection(s, rc, b, pool, None if batch is None else float(batch))


def recorded_bubble(meta: dict) -> tuple[float, int] | None:
    """The median of the step bubbles a run recorded (measured.bubble_fractions
    in a trace's otherData or a summary), its warm-up left out (the steps
    before measured.noise.first_counted_step; the first alone in older
    traces), and how many steps that is, as calibrate and compare read them
    (calibration::recorded_bubble); None when it has none."""
    measured = meta.get("measured") or {}
    every = measured.get("bubble_fractions")
    if not (isinstance(every, list) and every and all(isinstance(b, (int, float)) for b in every)):
        return None
    first = 1 if len(every) > 1 else 0
    noise = measured.get("noise")
    if isinstance(noise, dict) and "first_counted_step" in noise:
        first = noise["first_counted_step"]
        if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first < len(every):
            raise PlotError(f"otherData.measured.noise.first_counted_step is {first!r}, outside the {len(every)} "
                            "steps of measured.bubble_fractions")
    steps = every[first:]
    return float(median(steps)), len(steps)


def analytic_bubble(k: int, m: int) -> float:
    """The fill-drain bubble of GPipe and 1F1B: (K-1)/(M+K-1)."""
    return (k - 1) / (m + k - 1)


# --- drawing ----------------------------------------------------------------

# Okabe-Ito (colour-blind safe) for compute; light tints for transfers.
OP_COLORS = {
    "F": "#0072B2",
    "B": "#D55E00",
    "I": "#E69F00",
    "W": "#CC79A7",
    "R": "#009E73",
    "STEP": "#333333",
    "REDUCE_GRAD": "#56B4E9",
    "UNSHARD": "#F0E442",
    "RESHARD": "#F0E442",
    "SEND_F": "#9ecae1",
    "RECV_F": "#9ecae1",
    "SEND_B": "#f4a582",
    "RECV_B": "#f4a582",
}
OP_LABELS = {
    "F": "F forward",
    "B": "B backward",
    "I": "I input grad",
    "W": "W weight grad",
    "R": "R recompute",
    "STEP": "optimizer step",
    "REDUCE_GRAD": "grad all-reduce",
    "UNSHARD": "FSDP unshard (weights all-gather)",
    "SEND_F": "send/recv activations",
    "SEND_B": "send/recv gradients",
}


def time_unit(seconds: float) -> tuple[float, str]:
    """A scale and its unit so that `seconds` reads as a number from 1 to 1000."""
    if seconds >= 1:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def fmt_time(seconds: float) -> str:
    scale, unit = time_unit(seconds)
    return f"{seconds * scale:.3g} {unit}"


def fmt_bytes(b: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.0f} B"


def describe_config(meta: dict) -> str:
    """'transformer-small, 1f1b, K=2 M=8, micro-batch 4' from a trace's otherData."""
    parts = []
    if "model" in meta:
        parts.append(str(meta["model"]))
    if "schedule" in meta:
        parts.append(str(meta["schedule"]))
    shape = []
    if "ranks" in meta:
        shape.append(f"K={meta['ranks']}")
    if meta.get("stages_per_rank", 1) != 1:
        shape.append(f"V={meta['stages_per_rank']}")
    if "microbatches" in meta:
        shape.append(f"M={meta['microbatches']}")
    if shape:
        parts.append(" ".join(shape))
    if "microbatch_size" in meta:
        parts.append(f"micro-batch {meta['microbatch_size']}")
    if meta.get("recompute") not in (None, "none"):
        parts.append(f"recompute {meta['recompute']}")
    return ", ".join(parts)


def setup_matplotlib():
    """Headless pyplot (Agg), whatever the environment asks for."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError(f"{sys.executable}: matplotlib is not installed in this Python "
                        "(run scripts/setup.sh, or set PIPETWIN_VENV to the virtualenv that has it)") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.titlesize": 10, "svg.hashsalt": "pipetwin"})
    return plt


def finite(x) -> bool:
    return x is not None and math.isfinite(x)


# The writers of every output (files written whole, through a temporary and a rename).
from outputs import save_figure, write_text  # noqa: E402,F401  (after PlotError: outputs imports it)
