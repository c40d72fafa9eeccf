"""Every plot made through `pipetwin plot` from small real CLI outputs (two
simulations, two sweeps and one short `pipetwin run`), checked to be valid,
non-trivial PNG and SVG files; and the one-line errors, exit codes and the
absence of half-written files when inputs are missing or do not match.

The report (`pipetwin plot report`) from a real comparison and a real `pipetwin probe`.

Needs PIPETWIN_BINARY (the built pipetwin) and PIPETWIN_EXAMPLES (examples/)."""

import json
import os
import struct
import subprocess
import tempfile
import unittest
import xml.etree.ElementTree as ET

BINARY = os.environ.get("PIPETWIN_BINARY", "")
EXAMPLES = os.environ.get("PIPETWIN_EXAMPLES", "")
SMALL = os.path.join(EXAMPLES, "transformer-small.yaml")
T24 = os.path.join(EXAMPLES, "transformer-24.yaml")


def environment(extra=None):
    e = dict(os.environ, CI="true")
    e.update(extra or {})
    return e


def pipetwin(*args, env=None):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, env=environment(env), timeout=240)


def pipetwin_all(commands):
    """Runs the commands at once (they are independent); returns their results in order."""
    procs = [subprocess.Popen([BINARY, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=environment()) for args in commands]
    results = []
    for args, p in zip(commands, procs):
        out, err = p.communicate(timeout=240)
        results.append(subprocess.CompletedProcess([BINARY, *args], p.returncode, out, err))
    return results


def check_ok(test, r):
    test.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class PlotCli(unittest.TestCase):
    """The inputs are made, then every plot is drawn, each batch at once; the tests check the results."""

    @classmethod
    def setUpClass(cls):
        if not os.access(BINARY, os.X_OK):
            raise unittest.SkipTest("PIPETWIN_BINARY is not set to the pipetwin binary")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        d = cls.dir
        config = ["--model", SMALL, "-s", "1f1b", "-k", "2", "-m", "4", "--batch", "8"]
        inputs = [
            ["run", *config, "--steps", "1", "--threads", "1", "--trace", f"{d}/m.json", "--summary", f"{d}/m-summary.json"],
            ["simulate", *config, "--hardware", "cpu", "--trace", f"{d}/p.json"],
            ["simulate", "--model", SMALL, "-s", "zb-v", "-k", "2", "-m", "4", "--batch", "8", "--hardware", "cpu",
             "--trace", f"{d}/v.json"],
            ["sweep", "--model", SMALL, "--hardware", "cpu", "-k", "1,2", "-m", "1,2,4,8", "-s", "1f1b",
             "--microbatch-size", "2", "-j", "1", "--out", f"{d}/small.csv"],
            ["sweep", "--model", T24, "--hardware", "a100", "-k", "2,4,8", "-m", "1,4,32", "-s", "gpipe",
             "--recompute", "full", "-j", "1", "--out", f"{d}/t24.csv"],
        ]
        for r in pipetwin_all(inputs):
            if r.returncode != 0:
                raise AssertionError(f"pipetwin {' '.join(r.args[1:])} failed:\n{r.stdout}{r.stderr}")
        plots = {
            "gantt": ["plot", "gantt", f"{d}/p.json", f"{d}/m.json", "--out", f"{d}/gantt"],
            "bubble": ["plot", "bubble", f"{d}/small.csv", "--measured", f"{d}/m-summary.json", f"{d}/m.json",
                       "--out", f"{d}/bubble"],
            "speedup": ["plot", "speedup", f"{d}/t24.csv", "--out", f"{d}/speedup"],
            "memory": ["plot", "memory", f"{d}/m-summary.json", "--out", f"{d}/memory"],
            "memory-p": ["plot", "memory", f"{d}/p.json", "--out", f"{d}/memory-p"],
            "memory-v": ["plot", "memory", f"{d}/v.json", "--out", f"{d}/memory-v"],
            "heatmap": ["plot", "heatmap", f"{d}/t24.csv", "--metric", "throughput", "--out", f"{d}/heatmap"],
        }
        cls.plots = dict(zip(plots, pipetwin_all(list(plots.values()))))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def assert_valid_png_and_svg(self, prefix, min_width=400):
        with open(prefix + ".png", "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n", prefix)
        self.assertEqual(data[12:16], b"IHDR")
        width, height = struct.unpack(">II", data[16:24])
        self.assertGreaterEqual(width, min_width)
        self.assertGreaterEqual(height, 200)
        self.assertGreater(len(data), 15000, "PNG suspiciously small")
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.image as mpimg
        import numpy as np
        pixels = mpimg.imread(prefix + ".png")[..., :3]
        drawn = np.any(pixels < 0.9, axis=-1).mean()
        self.assertGreater(drawn, 0.03, f"{prefix}.png is almost blank")
        colours = len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0))
        self.assertGreater(colours, 20, f"{prefix}.png has hardly any colours")
        root = ET.parse(prefix + ".svg").getroot()
        self.assertTrue(root.tag.endswith("svg"), prefix)
        self.assertGreater(sum(1 for _ in root.iter()), 100, f"{prefix}.svg has hardly any elements")
        leftovers = [f for f in os.listdir(os.path.dirname(prefix)) if f.endswith(".tmp")]
        self.assertEqual(leftovers, [])

    def test_gantt_predicted_above_measured(self):
        r = self.plots["gantt"]
        check_ok(self, r)
        self.assertIn("gantt.png", r.stdout)
        self.assert_valid_png_and_svg(self.path("gantt"))

    def test_bubble_with_measured_points_and_closed_form(self):
        check_ok(self, self.plots["bubble"])
        self.assert_valid_png_and_svg(self.path("bubble"))

    def test_speedup_table_picture_and_markdown(self):
        check_ok(self, self.plots["speedup"])
        self.assert_valid_png_and_svg(self.path("speedup"))
        with open(self.path("speedup.md")) as f:
            md = f.read()
        self.assertIn("| **K = 2** | 1.00 |", md)
        self.assertIn("| **K = 8** |", md)

    def test_memory_of_a_run_and_of_a_simulation(self):
        check_ok(self, self.plots["memory"])
        self.assert_valid_png_and_svg(self.path("memory"))
        check_ok(self, self.plots["memory-p"])
        self.assert_valid_png_and_svg(self.path("memory-p"))

    def test_memory_per_rank_beside_per_stage_where_ranks_hold_two_stages(self):
        check_ok(self, self.plots["memory-v"])
        self.assert_valid_png_and_svg(self.path("memory-v"))
        widths = []
        for name in ("memory-p", "memory-v"):  # 2 stages on 2 ranks; 4 stages on 2 ranks, then the ranks' panel
            with open(self.path(name) + ".png", "rb") as f:
                widths.append(struct.unpack(">II", f.read(24)[16:24])[0])
        self.assertGreater(widths[1], widths[0] + 300)

    def test_report_with_the_hosts_cores_probed(self):
        d = self.dir
        compared = pipetwin("compare", f"{d}/p.json", f"{d}/m.json", "--json")
        check_ok(self, compared)
        with open(f"{d}/c.json", "w") as f:
            f.write(compared.stdout)
        probe = pipetwin("probe", "--threads", "2", "--rounds", "2", "--seconds", "0.02", "--quiet",
                         "--json", f"{d}/probe.json")
        check_ok(self, probe)
        self.assertIn("cores delivered: median", probe.stdout)
        with open(f"{d}/probe.json") as f:
            doc = json.load(f)
        self.assertEqual(len(doc["rounds"]), 2)
        self.assertEqual(doc["threads"], 2)
        report = pipetwin("plot", "report", "--compare", f"{d}/c.json", "--probe", f"{d}/probe.json",
                          "--out", f"{d}/report")
        check_ok(self, report)
        with open(f"{d}/report.md") as f:
            md = f.read()
        self.assertIn("The host's cores, probed around the runs (`pipetwin probe`, 2 rounds): 2 threads together", md)
        self.assertIn("| 1f1b K=2 M=4 batch=8 recompute=none |", md)
        # A file that is not a probe's: one line naming it, and no report.
        os.remove(f"{d}/report.md")
        bad = pipetwin("plot", "report", "--compare", f"{d}/c.json", "--probe", f"{d}/c.json", "--out", f"{d}/report")
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn(f"{d}/c.json: not a 'pipetwin probe --json' output", bad.stderr)
        self.assertFalse(os.path.exists(f"{d}/report.md"))

    def test_heatmap(self):
        check_ok(self, self.plots["heatmap"])
        self.assert_valid_png_and_svg(self.path("heatmap"), min_width=300)

    def test_missing_and_mismatched_inputs_give_one_line_and_no_file(self):
        missing = self.path("nothing.json")
        r = pipetwin("plot", "gantt", missing, "--out", self.path("bad1"))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stderr, f"pipetwin plot gantt: error: {missing}: no such file\n")
        with open(self.path("p.json")) as f:
            doc = json.load(f)
        doc["otherData"]["microbatches"] = 8
        other = self.path("p-m8.json")
        with open(other, "w") as f:
            json.dump(doc, f)
        r = pipetwin("plot", "gantt", self.path("p.json"), other, "--out", self.path("bad2"))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn(f"{other}: field 'microbatches' is 8 but {self.path('p.json')} has 4", r.stderr)
        r = pipetwin("plot", "heatmap", self.path("p.json"), "--out", self.path("bad3"))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("not a sweep CSV", r.stderr)
        r = pipetwin("plot", "gantt", self.path("p.json"), "--out", os.path.join(self.dir, "no-such-dir", "x"))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("does not exist", r.stderr)
        for name in os.listdir(self.dir):
            self.assertFalse(name.startswith("bad"), name)
            self.assertFalse(name.endswith(".tmp"), name)

    def test_outputs_through_links_devices_and_unwritable_folders(self):
        # A link is followed (it stays a link, its target gets the picture); a
        # device is written in place, never replaced by a regular file.
        real = self.path("real-target.png")
        link = self.path("linked.png")
        os.symlink(real, link)
        r = pipetwin("plot", "gantt", self.path("p.json"), "--out", self.path("linked"))
        check_ok(self, r)
        self.assertTrue(os.path.islink(link))
        with open(real, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        null_dir = self.path("null-out")
        os.mkdir(null_dir)
        for ext in ("png", "svg"):
            os.symlink("/dev/null", os.path.join(null_dir, f"g.{ext}"))
        r = pipetwin("plot", "gantt", self.path("p.json"), "--out", os.path.join(null_dir, "g"))
        check_ok(self, r)
        self.assertTrue(os.path.exists("/dev/null") and not os.path.isfile("/dev/null"))
        self.assertEqual(sorted(os.listdir(null_dir)), ["g.png", "g.svg"])
        # A folder where the SVG would go: refused before anything is drawn.
        os.mkdir(self.path("taken.svg"))
        r = pipetwin("plot", "gantt", self.path("p.json"), "--out", self.path("taken"))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f"{self.path('taken.svg')}: is a folder", r.stderr)
        self.assertFalse(os.path.exists(self.path("taken.png")))
        # A trace whose durations are NaN (Python's JSON reader would take them).
        with open(self.path("p.json")) as f:
            text = f.read()
        with open(self.path("nan.json"), "w") as f:
            f.write(text.replace('"dur":', '"dur": NaN, "x":', 1))
        r = pipetwin("plot", "gantt", self.path("nan.json"), "--out", self.path("nan"))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("NaN is not a JSON number", r.stderr)
        # An output folder this user may not write (unless root, who may).
        if os.geteuid() != 0:
            ro = self.path("read-only")
            os.mkdir(ro, 0o555)
            r = pipetwin("plot", "gantt", self.path("p.json"), "--out", os.path.join(ro, "g"))
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("cannot write", r.stderr)
        for name in os.listdir(self.dir):
            self.assertFalse(name.endswith(".tmp"), name)

    def test_command_line_errors(self):
        r = pipetwin("plot", "pie", self.path("p.json"), "--out", self.path("x"))
        self.assertEqual(r.returncode, 2, r.stderr)
        r = pipetwin("plot", "gantt", self.path("p.json"))
        self.assertEqual(r.returncode, 2, r.stderr)
        r = pipetwin("plot", "gantt", self.path("p.json"), "--out", self.path("x"),
                     env={"PIPETWIN_VENV": self.path("no-venv")})
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f"no Python at {self.path('no-venv')}/bin/python", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=1)
