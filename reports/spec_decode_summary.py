#!/usr/bin/env python3
"""spec_decode's summary (issue 25): from a results file's spec_decode rows, per target model, context
and alpha, the speedup of every (batch, K), the best K per batch and the crossover batch (the smallest
batch at which no K pays, best speedup < 1), as markdown on stdout. The same definitions as
suites/llama/spec_decode_model.h (best_draft_len, crossover_batch), which the unit tests hold.

Usage: spec_decode_summary.py RESULTS.json
"""
import os
import re
import sys
from collections import OrderedDict

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_report import fail, load_results  # noqa: E402

SPEEDUP = re.compile(r"^speedup_at_alpha_(.+)$")


def speedups(rows):
    """{(target, alpha): {batch: {K: speedup}}} from the ok spec_decode rows."""
    table = OrderedDict()
    for r in rows:
        if r.get("op") != "spec_decode" or r.get("status") != "ok":
            continue
        p = r["params"]
        target = f"{p.get('model', 'custom')}, {p.get('layers')} layers, context {p['context']}"
        for name, value in r.get("metrics", {}).items():
            m = SPEEDUP.match(name)
            if m:
                table.setdefault((target, m.group(1)), {}).setdefault(p["batch"], {})[p["draft_len"]] = value
    return table


def best_k(by_k):
    """The K of the largest speedup (the smallest K on ties)."""
    return min(by_k, key=lambda k: (-by_k[k], k))


def crossover(by_batch):
    """The smallest batch whose best speedup is under 1, or None when every batch pays."""
    losing = [b for b, by_k in by_batch.items() if max(by_k.values()) < 1.0]
    return min(losing) if losing else None


def main():
    if len(sys.argv) != 2:
        fail(__doc__.strip().splitlines()[-1])
    doc = load_results(sys.argv[1])
    table = speedups(doc["results"])
    if not table:
        fail(f"{sys.argv[1]}: no ok spec_decode rows")
    for (target, alpha), by_batch in table.items():
        ks = sorted({k for by_k in by_batch.values() for k in by_k})
        print(f"### {target}, alpha {alpha}\n")
        print("| batch | " + " | ".join(f"K={k}" for k in ks) + " | best K |")
        print("|---|" + "---|" * (len(ks) + 1))
        for batch in sorted(by_batch):
            by_k = by_batch[batch]
            cells = [f"{by_k[k]:.2f}x" if k in by_k else "" for k in ks]
            k = best_k(by_k)
            print(f"| {batch} | " + " | ".join(cells) + f" | {k} ({by_k[k]:.2f}x) |")
        c = crossover(by_batch)
        print(f"\ncrossover batch: {c if c is not None else 'none (speculation pays at every measured batch)'}\n")


if __name__ == "__main__":
    main()
