#!/usr/bin/env python3
"""reports/make_report.py: who leads a case, the README headline counts, and the README check."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(SOURCE_DIR, "reports", "make_report.py")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(SCRIPT))
import make_report  # noqa: E402


def row(impl, tokens, median, baseline=False, status="ok", op="rmsnorm", lo=None, hi=None, vs_baseline=None):
    r = {"op": op, "impl": impl, "is_baseline": baseline, "params": {"tokens": tokens, "hidden": 4096},
         "dtype": "bf16", "status": status, "time_us": {"median": median}, "flops": 1, "bytes": 1,
         "speedup_vs_baseline": vs_baseline, "unknown_future_field": 1}
    if lo is not None:
        r["speedup_lo"], r["speedup_hi"] = lo, hi
    return r


# tokens=1: ours leads cudnn, its interval above 1; tokens=2: its interval straddles 1 (a tie);
# tokens=3: unfused, not the baseline, is fastest and beats ours; tokens=4: ours failed its check.
ROWS = [
    row("cudnn", 1, 10.0, baseline=True), row("ours", 1, 8.0, lo=1.2, hi=1.3, vs_baseline=1.25),
    row("ours_v2", 1, 9.0, lo=1.05, hi=1.15, vs_baseline=1.11),
    row("cudnn", 2, 10.0, baseline=True), row("ours", 2, 9.9, lo=0.98, hi=1.04, vs_baseline=1.01),
    row("cudnn", 3, 10.0, baseline=True), row("unfused", 3, 6.0), row("ours", 3, 8.0, vs_baseline=1.25),
    row("cudnn", 4, 10.0, baseline=True), row("ours", 4, 1.0, status="check_failed"),
    row("contiguous", 1, 5.0, baseline=True, op="kv_cache_append"), row("paged", 1, 4.0, op="kv_cache_append"),
]


def results(rows):
    return {"schema": make_report.SCHEMA, "context": {"gpu": {"name": "Test GPU"}}, "results": rows}


class Verdicts(unittest.TestCase):
    def case(self, tokens):
        return [r for r in ROWS if r["params"]["tokens"] == tokens and r["op"] == "rmsnorm"]

    def test_the_fastest_ours_against_the_fastest_other(self):
        v, speedup, interval, ours, other = make_report.ours_vs_best_other(self.case(1))
        self.assertEqual((v, speedup, interval, ours["impl"], other["impl"]), ("leads", 1.25, (1.2, 1.3), "ours", "cudnn"))

    def test_an_interval_across_1_is_a_tie(self):
        self.assertEqual(make_report.ours_vs_best_other(self.case(2))[0], "ties")

    def test_a_faster_non_baseline_is_the_one_to_beat(self):
        v, speedup, interval, _, other = make_report.ours_vs_best_other(self.case(3))
        self.assertEqual((v, speedup, interval, other["impl"]), ("trails", 0.75, None, "unfused"))

    def test_a_failed_ours_row_is_not_compared(self):
        self.assertEqual(make_report.ours_vs_best_other(self.case(4))[0], "no ours row ok")


class Headline(unittest.TestCase):
    def test_every_case_is_counted_once(self):
        [h] = make_report.headline_rows(results(ROWS))
        self.assertEqual((h["op"], h["cases"], dict(h["counts"])),
                         ("rmsnorm", 4, {"leads": 1, "ties": 1, "trails": 1, "not compared": 1}))
        self.assertEqual(h["worst"][:3], (0.75, "ours", "unfused"))
        self.assertEqual(make_report.ops_without_ours(results(ROWS)), ["kv_cache_append"])

    def test_readme_is_rebuilt_from_every_config_and_checked(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "reports", "gpu0"))
            for name in ("a", "b"):
                with open(os.path.join(root, "reports", "gpu0", name + ".json"), "w") as f:
                    json.dump(results(ROWS), f)
            readme = os.path.join(root, "README.md")
            with open(readme, "w") as f:
                f.write(f"# x\n{make_report.BEGIN}\nstale\n{make_report.END}\nafter\n")

            def run(*extra):
                return subprocess.run([sys.executable, SCRIPT, "readme", readme, *extra], capture_output=True, text=True)

            self.assertEqual(run("--check").returncode, make_report.EXIT_STALE)
            self.assertEqual(run("--no-charts").returncode, 0)
            self.assertEqual(run("--check").returncode, 0)
            text = open(readme).read()
            for config in ("a", "b"):
                self.assertIn(f"| [{config}](reports/gpu0/{config}.md) | rmsnorm | 4 | 1 | 1 | 1 | 1 | 0.75×", text)
            self.assertTrue(text.endswith(f"{make_report.END}\nafter\n"))
            self.assertNotIn("stale", text)

    def test_a_readme_without_markers_is_exit_2(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "reports", "gpu0"))
            with open(os.path.join(root, "reports", "gpu0", "a.json"), "w") as f:
                json.dump(results(ROWS), f)
            readme = os.path.join(root, "README.md")
            with open(readme, "w") as f:
                f.write("# no markers\n")
            done = subprocess.run([sys.executable, SCRIPT, "readme", readme, "--check"], capture_output=True, text=True)
            self.assertEqual(done.returncode, make_report.EXIT_BAD_INPUT)
            self.assertIn(readme, done.stderr)


if __name__ == "__main__":
    unittest.main()
