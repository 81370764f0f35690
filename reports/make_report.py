#!/usr/bin/env python3
"""Charts for `topt report`: one results file (schema topt.results/1) in, PNG and SVG files out.

Per op: speedup vs the baseline per shape (bars), throughput against the swept axis (lines, one per
impl), a roofline against the ceilings measured in the same run, and each metric the rows report
(workspace, memory figures, counters) that varies, against the swept axis like throughput. Prints a
JSON manifest on stdout: {"charts": [{op, kind, title, png, svg}], "skipped": [{op, kind, why}]}, file
names relative to --out. Exit codes: 0 done, 2 bad input, 3 matplotlib missing.
"""
import argparse
import json
import math
import re
import sys
import textwrap
from collections import OrderedDict

SCHEMA = "topt.results/1"
EXIT_BAD_INPUT = 2
EXIT_NO_MATPLOTLIB = 3
MAX_PANELS = 12  # panels per chart; beyond this a chart is unreadable anyway
MAX_METRIC_CHARTS = 8  # charts of the rows' metrics per op

try:
    import matplotlib
except ImportError:
    print(f"make_report.py: matplotlib is not installed for {sys.executable}", file=sys.stderr)
    sys.exit(EXIT_NO_MATPLOTLIB)
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

# Byte-identical SVGs for identical data, so that committed charts only change when results do.
plt.rcParams.update({"svg.hashsalt": "topt", "figure.dpi": 110, "font.size": 9, "axes.grid": True,
                     "grid.alpha": 0.3, "legend.fontsize": 8})


def fail(msg):
    print(f"make_report.py: {msg}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


def varying(rows):
    """The parameters (and "dtype") that take more than one value among `rows`: the rest is noise in labels."""
    keys = [k for k in rows[0]["params"] if len({str(r["params"].get(k)) for r in rows}) > 1]
    return keys + (["dtype"] if len({r["dtype"] for r in rows}) > 1 else [])


def shape_keys(rows):
    """What tells the shapes of `rows` apart; every parameter when there is a single shape."""
    return varying(rows) or list(rows[0]["params"]) + ["dtype"]


def label(row, keys):
    return ",".join(f"{k}={row['dtype'] if k == 'dtype' else row['params'].get(k)}" for k in keys)


def safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def number_format(v):
    return f"{v:g}" if v < 1e5 else f"{v:.3g}"


def spans_decades(values):
    lo, hi = min(values), max(values)
    return lo > 0 and hi / lo >= 10


def set_log_axis(ax, axis, values):
    """Log scale with the swept values themselves as ticks: base 2 when they are powers of two."""
    powers_of_two = all(v > 0 and float(v).is_integer() and (int(v) & (int(v) - 1)) == 0 for v in values)
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2 if powers_of_two else 10)
    if axis == "x":
        # Values within 15% of the last labelled one (4096 beside 4100) would print over each other.
        ticks = []
        for v in sorted(set(values)):
            if not ticks or v / ticks[-1] >= 1.15:
                ticks.append(v)
        ax.set_xticks(ticks)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: number_format(v)))
        ax.xaxis.set_minor_formatter(NullFormatter())


class Report:
    def __init__(self, out_dir, name):
        self.out_dir, self.name = out_dir, name
        self.charts, self.skipped = [], []

    def save(self, fig, op, kind, title):
        stem = f"{safe(self.name)}_{safe(op)}_{kind}"
        fig.savefig(f"{self.out_dir}/{stem}.png", bbox_inches="tight")
        fig.savefig(f"{self.out_dir}/{stem}.svg", bbox_inches="tight", metadata={"Date": None})
        plt.close(fig)
        self.charts.append({"op": op, "kind": kind, "title": title, "png": f"{stem}.png", "svg": f"{stem}.svg"})

    def skip(self, op, kind, why):
        self.skipped.append({"op": op, "kind": kind, "why": why})


def speedup_chart(rep, op, rows, baseline):
    impls = list(OrderedDict.fromkeys(r["impl"] for r in rows if not r["is_baseline"]))
    keys = shape_keys(rows)
    shapes = list(OrderedDict.fromkeys(label(r, keys) for r in rows))
    speedup = {(label(r, keys), r["impl"]): r["speedup_vs_baseline"] for r in rows
               if r.get("speedup_vs_baseline") is not None}
    # Interleaved runs: the 95% interval of the median per-round speedup, drawn as an error bar.
    interval = {(label(r, keys), r["impl"]): (r["speedup_lo"], r["speedup_hi"]) for r in rows
                if r.get("speedup_lo") is not None and r.get("speedup_hi") is not None}
    if not impls or not any(k[1] in impls for k in speedup):
        return rep.skip(op, "speedup", f"no speedups vs {baseline} were recorded")
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(shapes) * max(1, len(impls)) ** 0.5 + 2), 4.2))
    width = 0.8 / len(impls)
    for i, impl in enumerate(impls):
        xs = [j + (i - (len(impls) - 1) / 2) * width for j in range(len(shapes))]
        ys = [speedup.get((s, impl), 0.0) for s in shapes]
        ax.bar(xs, ys, width, label=impl)
        spans = [interval.get((s, impl)) for s in shapes]
        if any(spans):
            # An interval that misses the bar (a pooled median outside the round medians' spread) clips to 0.
            err = [[max(0.0, y - sp[0]) if sp else 0.0 for y, sp in zip(ys, spans)],
                   [max(0.0, sp[1] - y) if sp else 0.0 for y, sp in zip(ys, spans)]]
            ax.errorbar(xs, ys, yerr=err, fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label=f"{baseline} (baseline)")
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(shapes, rotation=40, ha="right")
    ax.set_ylabel(f"speedup vs {baseline} (×)")
    ax.set_title(f"{op}: speedup vs {baseline} per shape (higher is better)")
    ax.grid(axis="x", visible=False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    rep.save(fig, op, "speedup", f"{op}: speedup vs {baseline}")


def swept_axis(rows):
    """The numeric parameter with the most distinct values, or None when nothing numeric varies."""
    best, best_count = None, 1
    for key in rows[0]["params"]:
        values = {r["params"].get(key) for r in rows}
        if all(isinstance(v, (int, float)) for v in values) and len(values) > best_count:
            best, best_count = key, len(values)
    return best


def bandwidth_peak(rows, peaks):
    """The measured DRAM rate the rows' bandwidth is held against: the read rate when every row's
    traffic is reads (bandwidth_ceiling "read") and the run measured it, else the copy rate."""
    if rows and peaks.get("dram_read_GBps") and all(r.get("bandwidth_ceiling") == "read" for r in rows):
        return peaks["dram_read_GBps"], "DRAM read"
    return peaks.get("dram_copy_GBps"), "DRAM copy"


def throughput_chart(rep, op, rows, peaks, memory_bound):
    metric, unit, peak = ("gbps", "GB/s", bandwidth_peak(rows, peaks)[0]) if memory_bound else \
        ("tflops", "TFLOP/s", peaks.get("bf16_gemm_TFLOPs"))
    axis_chart(rep, op, rows, "throughput", unit, f"achieved {unit}", lambda r: r.get(metric), peak,
               f"measured peak {peak:.0f} {unit}" if peak else None)


def metric_charts(rep, op, rows):
    """One chart per metric the rows report (row["metrics"]) that takes more than one value."""
    names = list(OrderedDict.fromkeys(k for r in rows for k, v in r.get("metrics", {}).items()
                                      if isinstance(v, (int, float)) and not isinstance(v, bool)))
    varying_names = [n for n in names if len({r["metrics"].get(n) for r in rows if n in r["metrics"]}) > 1]
    for name in varying_names[:MAX_METRIC_CHARTS]:
        axis_chart(rep, op, rows, f"metric_{safe(name)}", name, name, lambda r: r.get("metrics", {}).get(name))
    for name in varying_names[MAX_METRIC_CHARTS:]:
        rep.skip(op, f"metric_{safe(name)}", f"only the first {MAX_METRIC_CHARTS} varying metrics are charted")


def axis_chart(rep, op, rows, kind, what, ylabel, value, ceiling=None, ceiling_label=None):
    """`value(row)` against the swept axis, a line per impl, a panel per combination of the other varying
    parameters; rows without a value are left out."""
    axis = swept_axis(rows)
    if axis is None:
        return rep.skip(op, kind, "no numeric parameter is swept")
    rows = [r for r in rows if value(r) is not None]
    if not rows:
        return rep.skip(op, kind, f"no {what} values were recorded")

    panel_keys = [k for k in varying(rows) if k != axis]

    def panel_of(r):
        return label(r, panel_keys)

    panels = list(OrderedDict.fromkeys(panel_of(r) for r in rows))
    shown = panels[:MAX_PANELS]
    cols = min(3, len(shown))
    nrows = math.ceil(len(shown) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols + 1.6, 3.9 * nrows), squeeze=False, sharey=True)
    impls = list(OrderedDict.fromkeys(r["impl"] for r in rows))
    colors = {impl: f"C{i % 10}" for i, impl in enumerate(impls)}
    xs_all = [r["params"][axis] for r in rows]
    ys_all = [value(r) for r in rows] + ([ceiling] if ceiling else [])
    for ax, panel in zip(axes.flat, shown):
        for impl in impls:
            pts = sorted((r["params"][axis], value(r)) for r in rows if r["impl"] == impl and panel_of(r) == panel)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=colors[impl], label=impl)
        if ceiling:
            ax.axhline(ceiling, color="black", linewidth=1, linestyle="--", label=ceiling_label)
        if spans_decades(xs_all):
            set_log_axis(ax, "x", xs_all)
        if spans_decades(ys_all):
            ax.set_yscale("log")
        # Panel names list every parameter that varies: wrapped, so that neighbours' titles do not overlap.
        ax.set_title("\n".join(textwrap.wrap(panel.replace(",", ", "), 60, break_on_hyphens=False)), fontsize=8)
        ax.set_xlabel(axis)
    for ax in axes.flat[len(shown):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 0.95))
    more = f" (first {MAX_PANELS} of {len(panels)} panels)" if len(panels) > MAX_PANELS else ""
    fig.suptitle(f"{op}: {what} vs {axis}, one line per impl{more}")
    fig.tight_layout()
    rep.save(fig, op, kind, f"{op}: {what} vs {axis}")


def roofline_chart(rep, op, rows, peaks):
    (bw, bw_name), compute = bandwidth_peak(rows, peaks), peaks.get("bf16_gemm_TFLOPs")
    pts = [r for r in rows if r["flops"] > 0 and r["bytes"] > 0 and r.get("tflops")]
    if not pts:
        return rep.skip(op, "roofline", "its rows declare no FLOPs (or no bytes)")
    if not bw or not compute:
        return rep.skip(op, "roofline", "the run has no measured peaks (context.measured_peaks)")
    fig, ax = plt.subplots(figsize=(6.8, 4.6))
    intensity = [r["flops"] / r["bytes"] for r in pts]
    ridge = compute * 1e3 / bw  # FLOP/byte where the DRAM slope meets the compute ceiling
    lo = min(min(intensity), ridge) / 4
    hi = max(max(intensity), ridge) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(compute, x * bw / 1e3) for x in xs], color="black", linewidth=1.5,
            label=f"measured ceilings: {bw:.0f} GB/s {bw_name}, {compute:.0f} TFLOP/s bf16 GEMM")
    markers = "os^Dv<>pPX*h"
    for i, impl in enumerate(OrderedDict.fromkeys(r["impl"] for r in pts)):
        mine = [r for r in pts if r["impl"] == impl]
        ax.scatter([r["flops"] / r["bytes"] for r in mine], [r["tflops"] for r in mine],
                   marker=markers[i % len(markers)], color=f"C{i % 10}", label=impl, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic, op model)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"{op}: roofline against the peaks measured in this run")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    rep.save(fig, op, "roofline", f"{op}: roofline")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="results.json (schema topt.results/1)")
    ap.add_argument("--out", required=True, help="folder for the charts")
    ap.add_argument("--name", required=True, help="prefix of the chart file names")
    args = ap.parse_args()
    try:
        with open(args.results) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{args.results}: {e}")
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        fail(f"{args.results}: not a {SCHEMA} file")
    peaks = doc.get("context", {}).get("measured_peaks") or {}
    ridge = peaks["bf16_gemm_TFLOPs"] * 1e3 / peaks["dram_copy_GBps"] \
        if peaks.get("bf16_gemm_TFLOPs") and peaks.get("dram_copy_GBps") else None
    by_op = OrderedDict()
    for r in doc["results"]:
        by_op.setdefault(r["op"], []).append(r)
    rep = Report(args.out, args.name)
    for op, all_rows in by_op.items():
        baseline = next((r["impl"] for r in all_rows if r["is_baseline"]), "the baseline")
        rows = [r for r in all_rows if r["status"] == "ok"]
        if not rows:
            rep.skip(op, "speedup, throughput or roofline", "no row of it is ok")
            continue
        # Memory-bound ops are judged in GB/s, compute-bound ones in TFLOP/s.
        intensities = sorted(r["flops"] / r["bytes"] for r in rows if r["bytes"] > 0)
        memory_bound = ridge is None or not intensities or intensities[len(intensities) // 2] < ridge
        speedup_chart(rep, op, rows, baseline)
        throughput_chart(rep, op, rows, peaks, memory_bound)
        roofline_chart(rep, op, rows, peaks)
        metric_charts(rep, op, rows)
    json.dump({"charts": rep.charts, "skipped": rep.skipped}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
