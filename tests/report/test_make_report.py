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


def all_reduce_row(impl, size, median, baseline=False, timed=True):
    r = {"op": "all_reduce", "impl": impl, "is_baseline": baseline, "params": {"bytes": size}, "dtype": "bf16",
         "status": "ok", "flops": 0, "bytes": 0, "metrics": {"world_size": 2}}
    if timed:
        r["time_us"] = {"median": median}
        r["metrics"].update({"algbw_gbps": size / median / 1e3, "busbw_gbps": size / median / 1e3})
    else:
        r["reason"] = "check only, not timed: the 2 ranks share 1 GPU(s), where times mean nothing"
    return r


class CollectiveCharts(unittest.TestCase):
    def charts(self, rows):
        with tempfile.TemporaryDirectory() as root:
            path = os.path.join(root, "results.json")
            with open(path, "w") as f:
                json.dump(results(rows), f)
            done = subprocess.run([sys.executable, SCRIPT, "charts", path, "--out", root, "--name", "ar"],
                                  capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            return json.loads(done.stdout)

    def test_latency_and_busbw_against_size(self):
        rows = [all_reduce_row(impl, size, median * (1.0 if impl == "nccl" else 0.8), baseline=impl == "nccl")
                for size, median in ((4096, 5.0), (65536, 6.0), (1 << 20, 12.0), (1 << 24, 60.0))
                for impl in ("nccl", "ours")]
        kinds = {c["kind"] for c in self.charts(rows)["charts"]}
        self.assertTrue({"latency", "metric_busbw_gbps", "metric_algbw_gbps", "speedup"} <= kinds, kinds)

    def test_check_only_rows_are_not_charted(self):
        out = self.charts([all_reduce_row(impl, 4096, None, timed=False) for impl in ("ours", "ours_two_shot")])
        self.assertEqual(out["charts"], [])
        self.assertEqual(out["skipped"][0]["why"], "no row of it is ok and timed")


class TokensChart(unittest.TestCase):
    """decode_step's tokens/s against batch, with the floor: drawn from rows that carry tokens_per_step."""

    def test_drawn_with_the_floor(self):
        try:
            plt = make_report.pyplot()
        except SystemExit:
            self.skipTest("matplotlib missing")
        rows = []
        for model in ("llama2-7b", "llama2-13b"):
            for batch in (1, 4, 16):
                for impl, us in (("baseline", 6000.0), ("ours", 5000.0)):
                    params = {"model": model, "hidden": 4096, "batch": batch, "context": 1024}
                    rows.append({"op": "decode_step", "impl": impl, "is_baseline": impl == "baseline",
                                 "params": params, "dtype": "bf16", "status": "ok", "time_us": {"median": us},
                                 "flops": 1, "bytes": 1,
                                 "metrics": {"tokens_per_step": batch, "read_bound_us": 4500.0}})
        with tempfile.TemporaryDirectory() as out:
            rep = make_report.Report(out, "t")
            make_report.tokens_chart(plt, rep, "decode_step", rows)
            self.assertEqual([c["kind"] for c in rep.charts], ["tokens"])
            self.assertTrue(os.path.exists(os.path.join(out, rep.charts[0]["png"])))
        self.assertAlmostEqual(make_report.tokens_per_s(rows[-1]), 16 / 5e-3)


if __name__ == "__main__":
    unittest.main()
