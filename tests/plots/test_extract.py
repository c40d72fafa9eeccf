"""Unit tests of the plots' data extraction: the closed-form bubble, the
speed-up normalisation, the Gantt bars' positions, sweep selection, and the
one-line errors for missing or mismatched inputs; and of the scripts' trace
readers (scripts/trace_step.py, scripts/trace_partition.py). No figure is
drawn here."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plots"))
sys.path.insert(0, SCRIPTS)
import bubble  # noqa: E402
import common  # noqa: E402
import demo_rescore  # noqa: E402
import gantt  # noqa: E402
import heatmap  # noqa: E402
import memory  # noqa: E402
import report  # noqa: E402
import speedup  # noqa: E402
import stats  # noqa: E402
import trace_step  # noqa: E402
import wide_repeats  # noqa: E402

HEADER = ",".join(common.SWEEP_COLUMNS)


def trace_doc(events, meta=None):
    return {"traceEvents": [{"ph": "X", "name": n, "pid": p, "tid": 0, "ts": ts, "dur": d} for n, p, ts, d in events],
            "otherData": meta or {}}


class Files(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(text if isinstance(text, str) else json.dumps(text))
        return path

    def sweep(self, rows):
        return self.write("s.csv", HEADER + "\n" + "\n".join(rows) + "\n")


class TraceScripts(Files):
    def run_script(self, name, *args):
        return subprocess.run([sys.executable, os.path.join(SCRIPTS, name), *args], capture_output=True, text=True)

    def test_step_is_rank_0s_first_action_to_the_last_end(self):
        # rank 1 waits before rank 0 starts (the previous step): not counted
        path = self.write("t.json", trace_doc([("1RECV_F0", 1, 0, 3000), ("0F0", 0, 1000, 1000),
                                               ("1F0", 1, 3000, 2500)], {"partition": [[0, 3], [3, 6]]}))
        self.assertAlmostEqual(trace_step.step_of(path), 4.5e-3)
        r = self.run_script("trace_step.py", path)
        self.assertEqual((r.returncode, r.stdout), (0, f"{path} 0.004500\n"))
        r = self.run_script("trace_partition.py", path)
        self.assertEqual((r.returncode, r.stdout), (0, "0:3 3:6\n"))

    def test_counted_steps_and_the_noise_of_stored_runs(self):
        self.assertEqual(trace_step.counted({"noise": {"first_counted_step": 2}}, [9, 8, 7, 6]), [7, 6])
        self.assertEqual(trace_step.counted({}, [9, 8, 7]), [8, 7])  # older traces: the first alone
        # A list the run did not record (bench_fidelity reads a missing bubble_fractions as []): none.
        self.assertEqual(trace_step.counted({"noise": {"first_counted_step": 2}}, []), [])
        for bad in (3, -1, 2.0, True, None):
            with self.assertRaisesRegex(ValueError, "first_counted_step is .*, outside the 3 steps"):
                trace_step.counted({"noise": {"first_counted_step": bad}}, [9, 8, 7])
            with self.assertRaisesRegex(common.PlotError, "first_counted_step is .*, outside the 3 steps"):
                common.recorded_bubble({"measured": {"bubble_fractions": [0.1, 0.2, 0.3],
                                                     "noise": {"first_counted_step": bad}}})
        # Two configurations, three repeats each; every run's second step 10% slow.
        for name, paces in (("a", (1.0, 1.0, 1.2)), ("b", (2.0, 2.2, 2.0))):
            for r, pace in enumerate(paces, 1):
                steps = [pace * x for x in (1.3, 1.1, 1, 1, 1, 1)]
                self.write(f"{name}_r{r}.json", {"otherData": {"measured": {"step_times_s": steps}}})
        r = self.run_script("noise_of_runs.py", self.dir.name)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("6 runs, 2 configurations", r.stdout)
        self.assertIn("warm-up, each step over the run's steady steps (median over runs): 1.300 1.100 1.000", r.stdout)
        self.assertIn("a configuration's repeats spread (max/min - 1) median 15.0%, worst 20.0% (2 with 3 or more)",
                      r.stdout)
        self.write("c_r1.json", {"traceEvents": []})
        r = self.run_script("noise_of_runs.py", self.dir.name)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("c_r1.json: no measured step times", r.stderr)

    def test_demo_rescore_keeps_the_repeats_its_rule_names(self):
        # Five repeats whose traced steps take 5, 1, 4, 2, 3 ms (what the demo ranks them by).
        runs = []
        for r, pace in enumerate((5, 1, 4, 2, 3), 1):
            events = [("0F0", 0, 0, 1000 * pace / 2), ("1F0", 1, 1000 * pace / 2, 1000 * pace / 2)]
            runs.append(self.write(f"a_r{r}.json", trace_doc(events)))
        by_pace = [runs[1], runs[3], runs[4], runs[2], runs[0]]
        self.assertEqual(demo_rescore.keep("all", runs), by_pace)
        self.assertEqual(demo_rescore.keep("median", runs), [runs[4]])
        self.assertEqual(demo_rescore.keep("middle", runs), by_pace[1:4])
        self.assertEqual(demo_rescore.keep("fastest", runs), [runs[1]])
        self.assertEqual(demo_rescore.keep("fastest2", runs), [runs[1], runs[3]])
        self.assertEqual(demo_rescore.keep("fastest-half", runs), by_pace[:3])
        self.assertEqual(demo_rescore.keep("middle", runs[:2]), sorted(runs[:2], key=trace_step.step_of))
        r = self.run_script("demo_rescore.py", self.dir.name)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, f"^{self.dir.name}: not a demo's output to score again [^\n]*\n$")
        # A demo's output from before the .quiet lists: named, before calibrate is run on nothing.
        os.makedirs(os.path.join(self.dir.name, "old", "runs"))
        os.makedirs(os.path.join(self.dir.name, "old", "compare"))
        old = os.path.join(self.dir.name, "old")
        r = self.run_script("demo_rescore.py", old)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, f"^{old}: not a demo's output to score again [^\n]*: no {old}/runs/\\*\\.quiet list[^\n]*\n$")
        # A demo stopped before its comparisons: its runs are there, compare/ is empty.
        with open(os.path.join(old, "runs", "a.quiet"), "w", encoding="utf-8") as f:
            f.write(runs[0] + "\n")
        r = self.run_script("demo_rescore.py", old)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, f"^{old}: not a demo's output to score again [^\n]*: no {old}/compare/\\*\\.json[^\n]*\n$")
        # A demo's output moved: its lists name the runs where the demo wrote them
        # (here another folder holding files of the same names); each is read
        # from the list's own folder, a name not there as written.
        moved = os.path.join(old, "runs")
        self.write(os.path.join("old", "runs", "a_r2.json"), trace_doc([("0F0", 0, 0, 1000)]))
        with open(os.path.join(moved, "a.repeats"), "w", encoding="utf-8") as f:
            f.write(f"{runs[1]}\n{runs[2]}\n")
        self.assertEqual(demo_rescore.lines(os.path.join(moved, "a.repeats")), [os.path.join(moved, "a_r2.json"), runs[2]])

    def test_wide_repeats_names_the_configurations_whose_median_is_not_known(self):
        def run(name, r, step_ms, busy=False):
            meta = {"measured": {"noise": {"busy": busy}}}
            self.write(f"{name}_r{r}.json", trace_doc([("0F0", 0, 0, 1000 * step_ms)], meta))
        # a: five quiet runs within 2% (median 100, MAD 1): half-width
        # 2.776 x 1.2533 x 1.4826 x 1 / sqrt(5) / 100 = 2.3%.
        for r, ms in enumerate((100, 99, 101, 102, 98), 1):
            run("a", r, ms)
        # b: 100 to 140 ms; c: as a, but for a busy run of 200 ms (left out).
        for r, ms in enumerate((100, 140, 120, 105, 135), 1):
            run("b", r, ms)
        for r, ms in enumerate((100, 99, 101, 102, 100), 1):
            run("c", r, ms)
        run("c", 10, 200, busy=True)  # the tenth: runs are ordered by their number, not their name
        # g: three runs, two alike: an interval of +-0.5%, but fewer than five runs.
        for r, ms in enumerate((100, 100.5, 130), 1):
            run("g", r, ms)
        steps = [100, 99, 101, 102, 98]
        self.assertAlmostEqual(stats.median_half_width([s / 1e3 for s in steps]),
                               2.776 * 1.2533 * 1.4826 / 5 ** 0.5 / 100)
        self.assertEqual(stats.median_half_width([1, 2]), float("inf"))
        self.assertEqual([os.path.basename(f) for f in wide_repeats.runs_of(self.dir.name, "c")],
                         ["c_r1.json", "c_r2.json", "c_r3.json", "c_r4.json", "c_r5.json", "c_r10.json"])
        self.assertLess(stats.median_half_width([0.100, 0.1005, 0.130]), 0.10)
        r = self.run_script("wide_repeats.py", self.dir.name, "0.10", "9", "a", "b", "c", "g")
        self.assertEqual((r.returncode, r.stdout), (0, "b\ng\n"), r.stderr)
        r = self.run_script("wide_repeats.py", self.dir.name, "0.10", "3", "g")
        self.assertEqual((r.returncode, r.stdout), (0, ""), r.stderr)
        r = self.run_script("wide_repeats.py", self.dir.name, "0.01", "9", "a", "b", "c")
        self.assertEqual(r.stdout, "a\nb\nc\n")
        # At MAX runs, no more.
        r = self.run_script("wide_repeats.py", self.dir.name, "0.01", "5", "a", "b", "c")
        self.assertEqual((r.returncode, r.stdout), (0, ""))
        r = self.run_script("wide_repeats.py", self.dir.name, "0.10", "9", "d")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no runs of d in", r.stderr)
        # A run that is not a `pipetwin run` trace: one line naming it.
        bad = self.write("e_r1.json", trace_doc([("0F0", 0, 0, 1000)]))
        r = self.run_script("wide_repeats.py", self.dir.name, "0.10", "9", "e")
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, f"^wide_repeats.py: {bad}: no otherData.measured.noise.busy [^\n]*\n$")
        run("f", 1, 100, busy="yes")
        r = self.run_script("wide_repeats.py", self.dir.name, "0.10", "9", "f")
        self.assertEqual(r.returncode, 1)
        self.assertIn("otherData.measured.noise.busy is 'yes', not true or false", r.stderr)

    def test_forward_reads_sets_the_forwards_after_another_action_beside_those_after_a_forward(self):
        # 1f1b's rank 0: F0 (the first, left out), F1 after F0, F2 and F3 after a backward
        path = self.write("f.json", trace_doc([("0F0", 0, 0, 2000), ("0F1", 0, 2000, 1000), ("0B0", 0, 3000, 2000),
                                               ("0F2", 0, 5000, 1500), ("0B1", 0, 6500, 2000), ("0F3", 0, 8500, 1700),
                                               ("1F0", 1, 3000, 900), ("1B0", 1, 3900, 900), ("1F1", 1, 4800, 900)]))
        r = self.run_script("forward_reads.py", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, f"{path} rank 0 stage 0: 1 after a forward 1.000 ms, 2 after another action 1.600 ms "
                                   "(+60.0%)\nmedian over 1 rank-stages: +60.0%\n")  # rank 1: none after a forward
        gpipe = self.write("g.json", trace_doc([("0F0", 0, 0, 1000), ("0F1", 0, 1000, 1000), ("0B1", 0, 2000, 2000)]))
        r = self.run_script("forward_reads.py", gpipe)
        self.assertEqual((r.returncode, r.stdout), (0, "no rank ran both kinds of forward (gpipe has none after another "
                                                        "action)\n"))
        r = self.run_script("forward_reads.py", path, os.path.join(self.dir.name, "missing.json"))
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "")  # nothing printed before the bad file is met: all are read first
        self.assertRegex(r.stderr, "missing.json: no forwards to read [^\n]*\n$")

    def test_bad_traces_end_in_one_line_naming_the_file(self):
        empty = self.write("empty.json", {"traceEvents": []})
        broken = self.write("broken.json", "not json")
        missing = os.path.join(self.dir.name, "missing.json")
        for path in (empty, broken, missing):
            with self.assertRaisesRegex(ValueError, f"^{path}: no step to time"):
                trace_step.step_of(path)
            r = self.run_script("trace_step.py", path)
            self.assertEqual(r.returncode, 1)
            self.assertEqual(r.stdout, "")
            self.assertRegex(r.stderr, f"^{path}: no step to time [^\n]*\n$")
            r = self.run_script("trace_partition.py", path)
            self.assertEqual(r.returncode, 1)
            self.assertRegex(r.stderr, f"^{path}: no partition to read [^\n]*\n$")


class TraceMetaFields(unittest.TestCase):
    def test_the_configuration_fields_are_the_ones_the_cpp_side_writes_and_compares(self):
        # schedule/trace_metadata.cpp's configuration_fields(), read from its source.
        import re
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "schedule", "trace_metadata.cpp")
        with open(source, encoding="utf-8") as f:
            text = f.read()
        body = re.search(r"configuration_fields\(\) \{.*?fields\{(.*?)\};", text, re.S)
        self.assertIsNotNone(body, "configuration_fields() not found in trace_metadata.cpp")
        self.assertEqual(tuple(re.findall(r'"([a-z_]+)"', body.group(1))), common.CONFIG_FIELDS)

    def test_reads_what_run_and_simulate_write(self):
        meta = common.TraceMeta({"producer": "pipetwin run", "device": "cpu", "summary": {"engine": "measured"},
                                 "model": "m", "schedule": "1f1b", "ranks": 2, "microbatches": 4, "program": "rank 0: 0F0",
                                 "measured": {"bubble_fractions": [0.5, 0.2, 0.4, 0.3]}})
        self.assertEqual((meta.producer, meta.device, meta.engine, meta.program), ("pipetwin run", "cpu", "measured", "rank 0: 0F0"))
        self.assertEqual(meta.configuration(), {"model": "m", "schedule": "1f1b", "ranks": 2, "microbatches": 4})
        self.assertEqual(meta.describe(), "m, 1f1b, K=2 M=4")
        self.assertEqual(meta.recorded_bubble(), (0.3, 3))
        # Where the run says its counted steps begin (its noise record), from there.
        counted = {"bubble_fractions": [0.5, 0.2, 0.4, 0.3, 0.1], "noise": {"first_counted_step": 2}}
        self.assertEqual(common.recorded_bubble({"measured": counted}), (0.3, 3))
        self.assertEqual((common.TraceMeta(None).producer, common.TraceMeta({"device": 3}).device), ("", ""))


class ClosedForm(unittest.TestCase):
    def test_bubble_closed_form(self):
        self.assertEqual(common.analytic_bubble(1, 8), 0.0)
        self.assertAlmostEqual(common.analytic_bubble(4, 8), 3 / 11)
        self.assertAlmostEqual(common.analytic_bubble(2, 1), 0.5)
        self.assertEqual(bubble.analytic_series(4, [8, 1, 8]), [(1, 0.75), (8, 3 / 11)])


class Gantt(Files):
    def test_bars_sit_where_the_trace_puts_them(self):
        doc = trace_doc([("0F0", 0, 0, 1000), ("0SEND_F0", 0, 1000, 0), ("1RECV_F0", 1, 0, 1500),
                         ("1F0", 1, 1500, 2000), ("1STEP", 1, 3500, 500)])
        trace = common.parse_trace(doc, "t.json")
        bars = {(b.rank, b.kind): b for b in gantt.gantt_bars(trace)}
        f = bars[(0, "F")]
        self.assertEqual((f.lane, f.start, f.duration, f.label), ("compute", 0.0, 1e-3, "0"))
        self.assertAlmostEqual(f.y, 0 + gantt.LANES["compute"][0])
        r = bars[(1, "RECV_F")]
        self.assertEqual((r.lane, r.start, r.duration), ("recv", 0.0, 1.5e-3))
        self.assertAlmostEqual(r.y, 1 + gantt.LANES["recv"][0])
        self.assertEqual(bars[(0, "SEND_F")].lane, "send")
        self.assertEqual(bars[(1, "STEP")].label, "S")
        # lanes of one rank do not overlap and stay inside the rank's unit of height
        spans = sorted(gantt.LANES.values())
        for (y0, h), (y1, _) in zip(spans, spans[1:]):
            self.assertLessEqual(y0 + h, y1)
        self.assertLessEqual(spans[-1][0] + spans[-1][1], 1.0)
        # step time and bubble as schedule::Timeline computes them
        self.assertAlmostEqual(trace.step_time(), 4e-3)
        self.assertAlmostEqual(trace.bubble(), ((1 - 1 / 4) + (1 - 2 / 4)) / 2)

    def test_titles_give_the_traced_steps_bubble_and_the_runs_median(self):
        events = [("0F0", 0, 0, 1000), ("0SEND_F0", 0, 1000, 0), ("1RECV_F0", 1, 0, 1500), ("1F0", 1, 1500, 2000),
                  ("1STEP", 1, 3500, 500)]
        plain = common.parse_trace(trace_doc(events, {"producer": "pipetwin run"}), "m.json")
        self.assertEqual(gantt.panel_title("measured", plain), "measured (pipetwin run): step 4 ms, bubble 62.5%")
        # every step's bubble recorded: the median of all but the first (0.9: warm-up)
        run = common.parse_trace(trace_doc(events, {"producer": "pipetwin run",
                                                    "measured": {"bubble_fractions": [0.9, 0.2, 0.3, 0.25]}}), "m.json")
        self.assertEqual(gantt.panel_title("measured", run),
                         "measured (pipetwin run): step 4 ms, bubble 62.5% (the median of its 3 steps: 25.0%)")

    def test_bad_traces_name_the_file(self):
        with self.assertRaisesRegex(common.PlotError, r"^t.json: traceEvents\[0\]: field 'name'"):
            common.parse_trace(trace_doc([("zz", 0, 0, 1)]), "t.json")
        with self.assertRaisesRegex(common.PlotError, r"^t.json: not a Chrome trace"):
            common.parse_trace({"x": 1}, "t.json")
        with self.assertRaisesRegex(common.PlotError, r"missing.json: no such file"):
            common.load_trace(os.path.join(self.dir.name, "missing.json"))
        bad = self.write("bad.json", '{"traceEvents": [')
        with self.assertRaisesRegex(common.PlotError, "bad.json: not JSON"):
            common.load_trace(bad)

    def test_configurations_must_match(self):
        a = {"model": "m", "schedule": "1f1b", "ranks": 2, "microbatches": 4}
        common.check_same_configuration(a, "a.json", dict(a), "b.json")
        with self.assertRaisesRegex(common.PlotError, "^b.json: field 'microbatches' is 8 but a.json has 4"):
            common.check_same_configuration(a, "a.json", dict(a, microbatches=8), "b.json")
        b = dict(a)
        del b["schedule"]
        with self.assertRaisesRegex(common.PlotError, "^b.json: no field 'schedule'"):
            common.check_same_configuration(a, "a.json", b, "b.json")


class Sweep(Files):
    ROWS = [
        "gpipe,none,2,1,1,1,ok,1.0,10,0.5,1.0,fast,",
        "gpipe,none,2,1,4,4,ok,2.0,20,0.2,1.0,fast,",
        "gpipe,none,4,1,1,1,ok,0.5,12,0.75,1.0,fast,",
        "gpipe,none,4,1,4,4,oom,,,,,,\"stage 0 needs 20 GB of 16 GB\"",
        "gpipe,none,8,1,4,4,error,,,,,,partition: cannot cut",
        "1f1b,none,2,1,1,1,ok,1.0,11,0.5,1.0,fast,",
        "gpipe,none,2,1,1,2,ok,1.0,40,0.5,1.0,fast,",  # micro-batch size 2
    ]

    def test_selection_defaults_to_the_first_of_each(self):
        rows = common.load_sweep(self.sweep(self.ROWS))
        sel = common.select_rows(rows, "s.csv")
        self.assertEqual((sel.schedule, sel.recompute, sel.microbatch_size), ("gpipe", "none", 1.0))
        self.assertEqual(len(sel.rows), 5)
        self.assertEqual(len(common.select_rows(rows, "s.csv", "1f1b").rows), 1)
        self.assertEqual(len(common.select_rows(rows, "s.csv", microbatch_size=2).rows), 1)
        with self.assertRaisesRegex(common.PlotError, "^s.csv: no row with schedule 'zb-h1' \\(it holds gpipe, 1f1b\\)"):
            common.select_rows(rows, "s.csv", "zb-h1")

    def test_selection_by_batch_spans_micro_batch_sizes(self):
        # A sweep run with --batch 4: M=1 has micro-batch size 4, M=4 size 1.
        rows = common.load_sweep(self.sweep(self.ROWS))
        sel = common.select_rows(rows, "s.csv", batch=4)
        self.assertIsNone(sel.microbatch_size)
        self.assertEqual(sorted((r["ranks"], r["microbatches"]) for r in sel.rows), [(2, 4), (4, 4), (8, 4)])
        self.assertEqual({r["microbatch_size"] for r in sel.rows}, {1.0})
        self.assertEqual(sel.describe(), "gpipe, recompute none, batch 4")
        self.assertEqual(len(common.select_rows(rows, "s.csv", batch=1).rows), 2)
        with self.assertRaisesRegex(common.PlotError, "^s.csv: no row with batch 3 \\(it holds 1, 4, 2\\)"):
            common.select_rows(rows, "s.csv", batch=3)
        with self.assertRaisesRegex(common.PlotError, "not both"):
            common.select_rows(rows, "s.csv", microbatch_size=1, batch=4)

    def test_speedup_is_normalised_to_the_first_k_and_m(self):
        path = self.sweep(self.ROWS)
        sel = common.select_rows(common.load_sweep(path), path)
        cells, base = speedup.speedup_table(sel, path, [2, 4, 8], [1, 4, 32])
        self.assertEqual(base, 10)
        self.assertEqual(cells[(2, 1)], 1.0)
        self.assertEqual(cells[(2, 4)], 2.0)
        self.assertEqual(cells[(4, 1)], 1.2)
        self.assertEqual(cells[(4, 4)], "OOM")
        self.assertEqual(cells[(8, 4)], "error")
        self.assertIsNone(cells[(2, 32)])
        md = speedup.markdown([("x", sel, cells, base)], [2, 4, 8], [1, 4, 32], "T")
        self.assertIn("| **K = 2** | 1.00 | 2.00 | — |", md)
        self.assertIn("| **K = 4** | 1.20 | OOM | — |", md)
        with self.assertRaisesRegex(common.PlotError, "baseline K=8 M=1"):
            speedup.speedup_table(sel, path, [8, 2], [1, 4])

    def test_bubble_and_heatmap_series(self):
        path = self.sweep(self.ROWS)
        sel = common.select_rows(common.load_sweep(path), path)
        self.assertEqual(bubble.simulated_series(sel), {2: [(1, 0.5), (4, 0.2)], 4: [(1, 0.75)]})
        ks, ms, cells = heatmap.grid_of(sel, "bubble")
        self.assertEqual((ks, ms), ([2, 4, 8], [1, 4]))
        self.assertEqual(cells[(2, 4)], (20.0, "ok"))
        self.assertEqual(cells[(4, 4)], (None, "oom"))

    def test_bad_sweeps_name_the_file(self):
        with self.assertRaisesRegex(common.PlotError, "no column 'ranks'"):
            common.load_sweep(self.write("x.csv", "schedule,recompute\n"))
        with self.assertRaisesRegex(common.PlotError, r"s.csv:2: not a sweep row"):
            common.load_sweep(self.sweep(["gpipe,none,two,1,1,1,ok,1,1,1,1,fast,"]))
        with self.assertRaisesRegex(common.PlotError, "holds no row"):
            common.load_sweep(self.sweep([]))
        dup = self.sweep(self.ROWS[:1] * 2)
        with self.assertRaisesRegex(common.PlotError, "s.csv:3: a second row for gpipe K=2 M=1"):
            common.select_rows(common.load_sweep(dup), dup)

    def test_measured_points_come_from_run_summaries_and_refuse_another_schedule(self):
        path = self.sweep(self.ROWS)
        sel = common.select_rows(common.load_sweep(path), path)
        run = self.write("run.json", {"schedule": "gpipe", "recompute": "none", "microbatch_size": 1, "ranks": 2,
                                      "microbatches": 4, "summary": {"bubble_fraction": 0.25}})
        self.assertEqual(bubble.measured_point(run, sel), (2, 4, 0.25))
        # A run that recorded every step's bubble: the median of the steps
        # after the first (0.9 is the warm-up), not its summary's one step.
        steps = self.write("steps.json", {"schedule": "gpipe", "recompute": "none", "microbatch_size": 1, "ranks": 2,
                                          "microbatches": 4, "summary": {"bubble_fraction": 0.25},
                                          "measured": {"bubble_fractions": [0.9, 0.25, 0.5, 0.75, 0.125]}})
        self.assertEqual(bubble.measured_point(steps, sel), (2, 4, 0.375))
        other = self.write("o.json", {"schedule": "1f1b", "ranks": 2, "microbatches": 4, "summary": {}})
        with self.assertRaisesRegex(common.PlotError, "o.json: field 'schedule' is '1f1b'"):
            bubble.measured_point(other, sel)


class Memory(Files):
    def test_static_and_stash_split_and_measured_values(self):
        doc = {"stages_per_rank": 1,
               "predicted_stash_bytes_per_stage": [30.0, 10.0],
               "summary": {"memory_per_stage": [{"peak_bytes": 100.0, "capacity_bytes": 1000.0},
                                                {"peak_bytes": 60.0, "capacity_bytes": 1000.0}]},
               "measured": {"stages": [{"peak_stash_bytes": 33.0}, {"peak_stash_bytes": 10.0}],
                            "ranks": [{"peak_allocated_bytes": 120.0}, {"peak_allocated_bytes": 70.0}]}}
        st = memory.stage_memory(doc, "r.json")
        self.assertEqual([(s.static, s.stash, s.measured_stash, s.measured_allocated) for s in st],
                         [(70.0, 30.0, 33.0, 120.0), (50.0, 10.0, 10.0, 70.0)])
        with self.assertRaisesRegex(common.PlotError, "^x.json: no field 'summary.memory_per_stage'"):
            memory.stage_memory({"summary": {}}, "x.json")

    def test_ranks_that_hold_several_stages_have_their_own_bars(self):
        # A V-shaped schedule on 2 ranks: every stage fits in 80 GB, rank 0 (stages 0 and 3 together) does not.
        gb = 1e9
        doc = {"stages_per_rank": 2,
               "summary": {"memory_per_stage": [{"peak_bytes": p * gb, "capacity_bytes": 80 * gb} for p in (54, 47, 42, 39)],
                           "memory_per_rank": [{"peak_bytes": 89 * gb, "capacity_bytes": 80 * gb, "stages": 2},
                                               {"peak_bytes": 78 * gb, "capacity_bytes": 80 * gb, "stages": 2}]}}
        ranks = memory.rank_memory(doc, "v.json")
        self.assertEqual([(r.rank, r.peak, r.capacity, r.stages) for r in ranks],
                         [(0, 89 * gb, 80 * gb, 2), (1, 78 * gb, 80 * gb, 2)])
        self.assertEqual(memory.rank_memory({"summary": {"memory_per_stage": []}}, "one.json"), [])
        fig = memory.draw(memory.stage_memory(doc, "v.json"), doc, "v.json", None, ranks)
        self.assertEqual(len(fig.axes), 2)
        stage_ax, rank_ax = fig.axes
        self.assertEqual([t.get_text() for t in rank_ax.get_xticklabels()], ["rank 0\n2 stages", "rank 1\n2 stages"])
        self.assertEqual([t.get_text() for t in stage_ax.texts], ["68% of 80 GB", "59% of 80 GB", "52% of 80 GB", "49% of 80 GB"])
        self.assertEqual([t.get_text() for t in rank_ax.texts], ["111%: OOM", "98% of 80 GB"])
        self.assertEqual([round(b.get_height()) for b in rank_ax.patches], [89, 78])
        # One stage per rank: the figure is the stages' alone.
        one = {"summary": {"memory_per_stage": doc["summary"]["memory_per_stage"]}}
        self.assertEqual(len(memory.draw(memory.stage_memory(one, "o.json"), one, "o.json", None,
                                         memory.rank_memory(one, "o.json")).axes), 1)


class Report(Files):
    def compare_doc(self, predicted, measured, bubble_p, bubble_m, stash):
        return {"configuration": {"schedule": "1f1b", "ranks": 2, "microbatches": 8, "microbatch_size": 2,
                                  "recompute": "none"},
                "step_time_s": {"predicted": predicted, "measured": measured,
                                "relative_error": (predicted - measured) / measured},
                "bubble_fraction": {"predicted": bubble_p, "measured": bubble_m, "error_points": 100 * (bubble_p - bubble_m)},
                "stash_bytes_per_stage": {"stages": [{"relative_error": e} for e in stash]}}

    def test_rows_and_the_summary_line(self):
        a = self.write("a.json", self.compare_doc(0.105, 0.100, 0.30, 0.28, [0.01, -0.03]))
        b = self.write("b.json", self.compare_doc(0.190, 0.200, 0.20, 0.20, [0.0]))
        rows = [report.row(a), report.row(b)]
        self.assertAlmostEqual(rows[0]["error"], 0.05)
        self.assertAlmostEqual(rows[0]["stash_worst"], 0.03)
        self.assertEqual(rows[0]["name"], "1f1b K=2 M=8 batch=16 recompute=none")
        text = report.markdown(rows, [], "two runs", "T", self.dir.name)
        self.assertIn("| 1f1b K=2 M=8 batch=16 recompute=none | 105.0 ms | 100.0 ms | +5.0% |", text)
        self.assertIn("median |error| 5.0%, worst 5.0% over 2 held-out configurations", text)
        self.assertIn("Bubble: median |error| 1.0 points, worst 2.0", text)
        self.assertIn("worst 3.0%", text)

    def test_more_ranks_than_cores_say_the_bubble_is_the_least_certain(self):
        def with_trace(name, ranks, cores):
            trace = self.write(name + ".trace.json", {"otherData": {"measured": {"ranks": [{"host_cores": cores}] * ranks}}})
            doc = self.compare_doc(0.105, 0.100, 0.50, 0.53, [0.0])
            doc["configuration"]["ranks"] = ranks
            doc["measured"] = trace
            return report.row(self.write(name + ".json", doc))
        four = with_trace("four", 4, 2)
        self.assertEqual((four["ranks"], four["host_cores"]), (4, 2))
        text = report.markdown([four, with_trace("two", 2, 2)], [], None, "T", self.dir.name)
        self.assertIn("More ranks than cores: 1f1b K=4 M=8 batch=16 recompute=none (4 ranks on 2 cores).", text)
        self.assertNotIn("K=2", text[text.index("More ranks than cores"):])
        # A core per rank, or a trace that cannot be read: nothing said.
        self.assertNotIn("More ranks than cores", report.markdown([with_trace("one", 2, 4)], [], None, "T", self.dir.name))
        gone = self.compare_doc(0.105, 0.100, 0.50, 0.53, [0.0])
        gone["configuration"]["ranks"], gone["measured"] = 4, os.path.join(self.dir.name, "missing.json")
        r = report.row(self.write("gone.json", gone))
        self.assertIsNone(r["host_cores"])
        self.assertNotIn("More ranks than cores", report.markdown([r], [], None, "T", self.dir.name))

    def test_the_bubble_over_the_runs_steps_is_preferred(self):
        doc = self.compare_doc(0.105, 0.100, 0.30, 0.28, [0.0])
        doc["bubble_fraction"]["measured_over_steps"] = {"median": 0.31, "steps": 8, "error_points": -1.0}
        r = report.row(self.write("s.json", doc))
        self.assertEqual((r["bubble_measured"], r["bubble_points"]), (0.31, -1.0))
        self.assertIsNone(r["bubble_known"])
        self.assertEqual(r["bubble_verdict"], "unknown")

    def test_the_bubbles_spread_over_the_runs_and_its_verdict(self):
        doc = self.compare_doc(0.105, 0.100, 0.30, 0.28, [0.0])
        doc["bubble_fraction"]["measured_over_steps"] = {"median": 0.31, "steps": 35, "runs": 5,
                                                         "error_points": -1.0, "uncertainty_points": 2.54,
                                                         "run_medians": [0.18, 0.24, 0.25, 0.24, 0.15]}
        doc["verdict"] = {"step_time": "model error", "why": "...", "bubble": "within noise", "bubble_why": "..."}
        other = self.compare_doc(0.190, 0.200, 0.20, 0.24, [0.0])
        other["bubble_fraction"]["measured_over_steps"] = {"median": 0.24, "steps": 35, "runs": 5,
                                                           "error_points": -4.0, "uncertainty_points": 1.0}
        other["verdict"] = {"step_time": "model error", "why": "...", "bubble": "model error", "bubble_why": "..."}
        rows = [report.row(self.write("a.json", doc)), report.row(self.write("b.json", other))]
        text = report.markdown(rows, [], None, "T", self.dir.name)
        self.assertIn("| 30.0% / 31.0% ±2.5 pt | -1.0 pt | within noise |", text)
        self.assertIn("| 20.0% / 24.0% ±1.0 pt | -4.0 pt | model error |", text)
        self.assertIn("worst 4.0 (1 of 2 within how far the bubble moves from run to run).", text)

    def test_a_file_that_is_not_a_comparison_is_named(self):
        path = self.write("x.json", {"traceEvents": []})
        with self.assertRaises(common.PlotError) as e:
            report.row(path)
        self.assertIn("x.json: not a 'pipetwin compare --json' report", str(e.exception))

    def test_noise_columns_and_busy_runs_left_out_of_the_figures(self):
        quiet = self.compare_doc(0.105, 0.100, 0.30, 0.28, [0.0])
        quiet["noise"] = {"other_share": 0.002, "steal_share": 0.0, "median_uncertainty_rel": 0.012}
        quiet["verdict"] = {"step_time": "model error", "why": "..."}
        busy = self.compare_doc(0.100, 0.160, 0.30, 0.20, [0.0])
        busy["noise"] = {"other_share": 0.38, "steal_share": 0.01, "median_uncertainty_rel": 0.06}
        busy["verdict"] = {"step_time": "not meaningful", "why": "..."}
        rows = [report.row(self.write("q.json", quiet)), report.row(self.write("b.json", busy))]
        text = report.markdown(rows, [], None, "T", self.dir.name)
        self.assertIn("**1 of 2 comparisons are not meaningful: the machine was busy while they ran**", text)
        self.assertIn("1f1b K=2 M=8 batch=16 recompute=none: 39%", text)
        self.assertIn("| 105.0 ms | 100.0 ms ±1.2% | +5.0% | model error | 0.2% |", text)
        self.assertIn("| 160.0 ms ±6.0% | -37.5% | not meaningful | 39.0% |", text)
        # The busy run's -37.5% is not in the figures: only the quiet one's 5.0%.
        self.assertIn("median |error| 5.0%, worst 5.0% over 1 held-out configurations (0 within", text)
        only_busy = report.markdown(rows[1:], [], None, "T", self.dir.name)
        self.assertIn("No comparison is meaningful", only_busy)
        self.assertNotIn("median |error|", only_busy)
        # A report without noise (an older compare): said, and counted.
        old = report.row(self.write("o.json", self.compare_doc(0.105, 0.100, 0.30, 0.28, [0.0])))
        self.assertIn("| unknown | not recorded |", report.markdown([old], [], None, "T", self.dir.name))

    def test_repeats_widen_the_measured_interval_and_are_counted(self):
        doc = self.compare_doc(0.105, 0.100, 0.30, 0.28, [0.0])
        doc["noise"] = {"other_share": 0.0, "steal_share": 0.0, "median_uncertainty_rel": 0.012}
        doc["repeats"] = {"steps_s": [0.09, 0.1, 0.11, 0.1, 0.12], "median_uncertainty_rel": 0.081, "median_s": 0.1,
                          "relative_error": 0.05}
        doc["verdict"] = {"step_time": "within noise", "why": "..."}
        text = report.markdown([report.row(self.write("r.json", doc))], [], None, "T", self.dir.name)
        self.assertIn("| 100.0 ms ±8.1% (5 runs) | +5.0% | within noise |", text)
        # Tighter repeats than the run's own steps: the run's interval stays.
        doc["repeats"]["median_uncertainty_rel"] = 0.004
        text = report.markdown([report.row(self.write("r.json", doc))], [], None, "T", self.dir.name)
        self.assertIn("| 100.0 ms ±1.2% (5 runs) |", text)
        # Their median, where it is not the traced run's step, is what the prediction is held against.
        doc["repeats"].update({"median_s": 0.104, "relative_error": 0.105 / 0.104 - 1})
        text = report.markdown([report.row(self.write("r.json", doc))], [], None, "T", self.dir.name)
        self.assertIn("| 105.0 ms | 104.0 ms ±1.2% (5 runs) | +1.0% |", text)

    def test_the_same_works_cpu_time_over_the_runs_is_a_column_and_a_line(self):
        doc = self.compare_doc(0.105, 0.100, 0.30, 0.28, [0.0])
        doc["noise"] = {"other_share": 0.0, "steal_share": 0.0, "median_uncertainty_rel": 0.012}
        doc["repeats"] = {"steps_s": [0.09, 0.1, 0.12], "median_uncertainty_rel": 0.1, "median_s": 0.1,
                          "relative_error": 0.05, "compute_cpu_s": [0.15, 0.18, 0.2]}
        doc["verdict"] = {"step_time": "within noise", "why": "..."}
        other = dict(doc, repeats=dict(doc["repeats"], compute_cpu_s=[0.1, 0.11]))
        rows = [report.row(self.write("a.json", doc)), report.row(self.write("b.json", other))]
        self.assertAlmostEqual(rows[0]["pace_spread"], 0.2 / 0.15 - 1)
        text = report.markdown(rows, [], None, "T", self.dir.name)
        self.assertIn("| within noise | 0.0% | 33% apart |", text)
        # The median of 33% and 10% is 22%; the worst names its configuration.
        self.assertIn("the same compute took a median 22% more CPU time in its slowest run than in its fastest "
                      "(worst 33%, 1f1b K=2 M=8 batch=16 recompute=none)", text)
        # Runs that did not all measure it: not recorded, and no line.
        doc["repeats"]["compute_cpu_s"] = [0.15, 0]
        row = report.row(self.write("c.json", doc))
        self.assertIsNone(row["pace_spread"])
        text = report.markdown([row], [], None, "T", self.dir.name)
        self.assertIn("| within noise | 0.0% | not recorded |", text)
        self.assertNotIn("The host's pace", text)

    def test_what_the_noise_alone_would_show(self):
        # One configuration measured to +-9.8% (sd 5%): a model without error
        # reads |N(0, 5%)|, whose median is 0.6745 sd, and meets the step aims
        # (median <= 5%, worst <= 10%) where |z| <= 1: 68.3% of draws.
        r = {"known": 0.098, "bubble_known": 3.92}  # bubble sd 2 points: within 3 where |z| <= 1.5, 86.6%
        n = report.noise_alone([r])
        self.assertAlmostEqual(n["median"], 0.6745 * 0.05, delta=0.002)
        self.assertAlmostEqual(n["worst"], n["median"])
        self.assertAlmostEqual(n["step_aims_met"], 0.6827, delta=0.015)
        self.assertAlmostEqual(n["bubble_aim_met"], 0.8664, delta=0.012)
        self.assertEqual(report.noise_alone([r]), n)  # seeded
        # Five tight ones meet the aims; five of +-20% rarely; none known: no line.
        tight = report.noise_alone([{"known": 0.02, "bubble_known": None}] * 5)
        self.assertGreater(tight["step_aims_met"], 0.999)
        self.assertIsNone(tight["bubble_aim_met"])
        wide = report.noise_alone([{"known": 0.20, "bubble_known": 5.0}] * 5)
        self.assertLess(wide["step_aims_met"], 0.2)
        self.assertGreater(wide["worst"], 0.10)
        self.assertIsNone(report.noise_alone([{"known": 0, "bubble_known": None}]))
        # In the report, under the figures; a noisy one says what follows.
        doc = self.compare_doc(0.105, 0.100, 0.30, 0.28, [0.0])
        doc["noise"] = {"other_share": 0.0, "steal_share": 0.0, "median_uncertainty_rel": 0.25}
        doc["verdict"] = {"step_time": "within noise", "why": "..."}
        text = report.markdown([report.row(self.write("n.json", doc))], [], None, "T", self.dir.name)
        self.assertIn("What the noise alone would show: a model without error, measured as these 1 were", text)
        self.assertIn("figures beyond the aims say little about the model", text)
        doc["noise"]["median_uncertainty_rel"] = 0.01
        text = report.markdown([report.row(self.write("n.json", doc))], [], None, "T", self.dir.name)
        self.assertIn("meet the step aims (median <= 5%, worst <= 10%) in 100% of such runs.", text)
        self.assertNotIn("say little", text)


if __name__ == "__main__":
    unittest.main()
