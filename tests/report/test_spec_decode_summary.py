#!/usr/bin/env python3
"""reports/spec_decode_summary.py: the best K per batch (the smallest K on ties) and the crossover batch."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(SOURCE_DIR, "reports", "spec_decode_summary.py")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(SCRIPT))
import spec_decode_summary as summary  # noqa: E402


def row(batch, k, speedup, status="ok"):
    return {"op": "spec_decode", "impl": "ours", "status": status, "dtype": "bf16",
            "params": {"model": "llama2-7b", "layers": 32, "context": 1024, "batch": batch, "draft_len": k},
            "metrics": {"speedup_at_alpha_0.8": speedup, "round_us": 1.0}}


ROWS = [row(1, 1, 1.6), row(1, 2, 2.1), row(1, 3, 2.4), row(1, 4, 2.4),  # K 3 and 4 tie: 3
        row(16, 1, 1.2), row(16, 2, 1.3), row(16, 3, 1.1), row(16, 4, 0.9),
        row(64, 1, 0.95), row(64, 2, 0.8), row(64, 3, 0.7), row(64, 4, 0.6),
        row(256, 1, 0.5), row(4, 1, 9.0, status="error")]


class SpecDecodeSummary(unittest.TestCase):
    def test_best_k_and_crossover(self):
        table = summary.speedups(ROWS)
        by_batch = table[("llama2-7b, 32 layers, context 1024", "0.8")]
        self.assertNotIn(4, by_batch)  # a failed row is left out
        self.assertEqual([summary.best_k(by_batch[b]) for b in (1, 16, 64)], [3, 2, 1])
        self.assertEqual(summary.crossover(by_batch), 64)
        self.assertIsNone(summary.crossover({1: {4: 2.5}, 64: {1: 1.01}}))

    def test_markdown_and_bad_input(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "results.json")
            with open(path, "w") as f:
                json.dump({"schema": "topt.results/1", "results": ROWS}, f)
            out = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("| 1 | 1.60x | 2.10x | 2.40x | 2.40x | 3 (2.40x) |", out.stdout)
            self.assertIn("crossover batch: 64", out.stdout)
            with open(path, "w") as f:
                json.dump({"schema": "topt.results/1", "results": []}, f)
            out = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True)
            self.assertEqual(out.returncode, 2)
            self.assertIn("no ok spec_decode rows", out.stderr)


if __name__ == "__main__":
    unittest.main()
