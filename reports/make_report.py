#!/usr/bin/env python3
"""Charts and README results for TransformerOpt (schema topt.results/1).

  make_report.py charts RESULTS --out DIR --name NAME
      The charts of one results file, for `topt report`: per op, each implementation's speedup over
      the fastest other one in the same case, a roofline against the ceilings measured in the same
      run, and the achieved rate and each varying metric of the rows: lines against the swept axis
      where each line has 3 points or more, else a dot per case; for decode steps (rows with the metric
      tokens_per_step) tokens/s against batch with the floor drawn. At most 1,800 px wide.
      Prints a JSON manifest on stdout: {"charts": [{op, kind, title, png, svg}], "skipped": [{op,
      kind, why}]}, file names relative to --out.
  make_report.py readme README.md [--check] [--no-charts]
      Rewrites what lies between README's results markers from every reports/<gpu>/*.json beside it:
      a headline table (per config and op, the cases ours leads, ties and trails against the fastest
      other implementation) and its charts (reports/<gpu>/headline/*.png). --check compares instead
      of writing and exits 1 when README is out of date.

Exit codes: 0 done, 1 README out of date (--check), 2 bad input or an unwritable file, 3 matplotlib
missing.
"""
import argparse
import glob
import json
import math
import os
import re
import sys
import textwrap
from collections import OrderedDict

SCHEMA = "topt.results/1"
EXIT_STALE = 1
EXIT_BAD_INPUT = 2
EXIT_NO_MATPLOTLIB = 3
BEGIN = "<!-- topt:results:begin -->"
END = "<!-- topt:results:end -->"
DPI = 110
MAX_WIDTH_PX = 1800
MAX_PANELS = 12
MIN_POINTS_PER_LINE = 3  # fewer x values than this per panel: the op's table says it better
MAX_METRIC_CHARTS = 8


def fail(msg, code=EXIT_BAD_INPUT):
    print(f"make_report.py: {msg}", file=sys.stderr)
    sys.exit(code)


def pyplot():
    """matplotlib's pyplot, imported on first use so that `readme --check` works without it."""
    try:
        import matplotlib
    except ImportError:
        fail(f"matplotlib is not installed for {sys.executable} (scripts/setup.sh installs it)", EXIT_NO_MATPLOTLIB)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # Byte-identical SVGs for identical data, so that charts only change when results do.
    plt.rcParams.update({"svg.hashsalt": "topt", "figure.dpi": DPI, "font.size": 9, "axes.grid": True,
                         "grid.alpha": 0.3, "legend.fontsize": 8})
    return plt


def load_results(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("results"), list):
        fail(f"{path}: not a {SCHEMA} file")
    return doc


# ---- cases and who leads them ------------------------------------------------------------------

def is_ours(row):
    """The row's role where recorded (ours, baseline, peer); older files named ours' rungs ours*."""
    return row["role"] == "ours" if row.get("role") else row["impl"].startswith("ours")


def is_timed(row):
    """An ok row with a time: not a check-only row (ranks sharing a GPU: docs/multi-gpu.md)."""
    return row["status"] == "ok" and bool(row.get("time_us"))


def median_us(row):
    return row["time_us"]["median"]


def case_key(row):
    return json.dumps(row["params"], sort_keys=True) + "|" + row["dtype"]


def by_key(rows, key):
    groups = OrderedDict()
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    return groups


def varying(rows):
    """The parameters (and "dtype") that take more than one value among `rows`: the rest is noise in labels."""
    names = list(OrderedDict.fromkeys(k for r in rows for k in r["params"]))
    keys = [k for k in names if len({str(r["params"].get(k)) for r in rows}) > 1]
    return keys + (["dtype"] if len({r["dtype"] for r in rows}) > 1 else [])


def label(row, keys, sep=","):
    """k=v of `keys`; a parameter the row does not have (a default, e.g. timing) is left out."""
    values = ((k, row["dtype"] if k == "dtype" else row["params"].get(k)) for k in keys)
    return sep.join(f"{k}={v}" for k, v in values if v is not None)


def speedup_over(row, other):
    """time(other) / time(row), with the per-round 95% interval where the run measured one against
    `other`: the baseline (speedup_lo/hi) or, for ours, the fastest other (best_other_lo/hi)."""
    for speedup, lo, hi, against in (("speedup_vs_baseline", "speedup_lo", "speedup_hi", other["is_baseline"]),
                                     ("speedup_vs_best_other", "best_other_lo", "best_other_hi",
                                      row.get("best_other") == other["impl"])):
        if against and row.get(speedup) is not None:
            lo, hi = row.get(lo), row.get(hi)
            return row[speedup], (lo, hi) if lo is not None and hi is not None else None
    return median_us(other) / median_us(row), None


def fastest(rows):
    return min(rows, key=median_us) if rows else None


def verdict(speedup, interval):
    if interval and interval[0] <= 1.0 <= interval[1]:
        return "ties"
    return "leads" if speedup > 1.0 else "trails" if speedup < 1.0 else "ties"


def ours_vs_best_other(case_rows):
    """The fastest ours* row of a case against the fastest other one: (verdict, speedup, interval,
    ours row, other row), or (why not, None...) when either side has no ok row."""
    ok = [r for r in case_rows if is_timed(r)]
    ours, other = fastest([r for r in ok if is_ours(r)]), fastest([r for r in ok if not is_ours(r)])
    if ours is None:
        return "no ours row ok", None, None, None, other
    if other is None:
        return "no other row ok", None, None, ours, None
    speedup, interval = speedup_over(ours, other)
    return verdict(speedup, interval), speedup, interval, ours, other


# ---- README ------------------------------------------------------------------------------------

def reports_of(root):
    """{gpu folder: [(config, path, doc)]} for every reports/<gpu>/*.json under `root`."""
    found = OrderedDict()
    for path in sorted(glob.glob(os.path.join(root, "reports", "*", "*.json"))):
        gpu = os.path.basename(os.path.dirname(path))
        found.setdefault(gpu, []).append((os.path.splitext(os.path.basename(path))[0], path, load_results(path)))
    return found


def headline_rows(doc):
    """Per op of a results file that has ours* implementations: counts of each verdict and the worst case."""
    out = []
    for op, rows in by_key(doc["results"], lambda r: r["op"]).items():
        if not any(is_ours(r) for r in rows):
            continue
        cases = by_key(rows, case_key)
        keys = short_label_keys(rows)
        counts = OrderedDict((v, 0) for v in ("leads", "ties", "trails", "not compared"))
        worst = None
        for case_rows in cases.values():
            v, speedup, _, ours, other = ours_vs_best_other(case_rows)
            counts[v if v in counts else "not compared"] += 1
            if speedup is not None and (worst is None or speedup < worst[0]):
                worst = (speedup, ours["impl"], other["impl"], label(ours, keys, ", "))
        out.append({"op": op, "cases": len(cases), "counts": counts, "worst": worst})
    return out


def ops_without_ours(doc):
    return [op for op, rows in by_key(doc["results"], lambda r: r["op"]).items()
            if not any(is_ours(r) for r in rows)]


def headline_markdown(reports, chart_paths):
    out = [f"<!-- written by `scripts/report.sh` (reports/make_report.py readme) from reports/*/*.json: "
           "edits between these markers are overwritten -->", ""]
    for gpu, configs in reports.items():
        gpu_names = sorted({doc.get("context", {}).get("gpu", {}).get("name", gpu) for _, _, doc in configs})
        out += [f"### {gpu}: {', '.join(gpu_names)}", "",
                "Every row, per config: " + " · ".join(f"[{config}](reports/{gpu}/{config}.md)"
                                                       for config, _, _ in configs) + ".", "",
                "Per config and op: the cases where our fastest `ours*` implementation leads, ties or trails "
                "the fastest other implementation of the same case (by median time; a tie when the 95% interval "
                "of the per-round speedup straddles 1.0, where the run measured one against that implementation), "
                "and the worst case.", "",
                "| config | op | cases | ours leads | ties | trails | not compared | worst case: ours / fastest other |",
                "|---|---|--:|--:|--:|--:|--:|---|"]
        skipped = []
        for config, path, doc in configs:
            link = f"[{config}](reports/{gpu}/{config}.md)"
            for h in headline_rows(doc):
                c, w = h["counts"], h["worst"]
                worst = f"{w[0]:.2f}× ({w[1]} vs {w[2]}; {w[3] or 'the one case'})" if w else "–"
                out.append(f"| {link} | {h['op']} | {h['cases']} | {c['leads']} | {c['ties']} | {c['trails']} | "
                           f"{c['not compared']} | {worst} |")
            skipped += [f"`{op}` ([{config}](reports/{gpu}/{config}.md))" for op in ops_without_ours(doc)]
        out.append("")
        if skipped:
            out += ["Without an `ours*` implementation, so not in the table: " + ", ".join(skipped) + ".", ""]
        for title, png in chart_paths.get(gpu, []):
            out += [f"![{title}]({png})", ""]
    return "\n".join(out)


def replace_block(text, block, readme):
    begin = text.find(BEGIN)
    end = text.find(END, begin + len(BEGIN)) if begin >= 0 else -1
    if begin < 0 or end < 0:
        fail(f"{readme}: no '{BEGIN}' ... '{END}' block: add the two lines where the results go")
    return text[:begin + len(BEGIN)] + "\n" + block + "\n" + text[end:]


def write_bytes(path, data):
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(data)
    except OSError as e:
        fail(f"{path}: {e.strerror}")


def readme_command(args):
    root = os.path.dirname(os.path.abspath(args.readme))
    try:
        with open(args.readme) as f:
            text = f.read()
    except OSError as e:
        fail(f"{args.readme}: {e.strerror}")
    reports = reports_of(root)
    if not reports:
        fail(f"{root}/reports/*/*.json: no results files")
    # Chart names are derived from the data alone, so --check knows them without drawing.
    charts = OrderedDict((gpu, headline_chart_specs(gpu, configs)) for gpu, configs in reports.items())
    if not args.check and not args.no_charts:
        plt = pyplot()
        for gpu, specs in charts.items():
            for spec in specs:
                spec["draw"](plt, os.path.join(root, spec["png"]))
    chart_paths = {gpu: [(s["title"], s["png"]) for s in specs] for gpu, specs in charts.items()}
    new_text = replace_block(text, headline_markdown(reports, chart_paths), args.readme)
    if args.check:
        if new_text != text:
            fail(f"{args.readme}: its results block does not match reports/*/*.json; run scripts/report.sh", EXIT_STALE)
        print(f"make_report.py: {args.readme} matches {sum(len(c) for c in reports.values())} results files")
        return
    write_bytes(args.readme, new_text)
    drawn = 0 if args.no_charts else sum(len(s) for s in charts.values())
    print(f"make_report.py: wrote the results block of {args.readme} and {drawn} charts")


# ---- charts ------------------------------------------------------------------------------------

def save(plt, fig, png, svg=None):
    """Writes the figure, refusing one wider than a screen."""
    width = fig.get_size_inches()[0] * DPI
    if width > MAX_WIDTH_PX:
        raise AssertionError(f"{png}: {width:.0f} px wide")  # a layout bug, not bad input
    try:
        os.makedirs(os.path.dirname(png) or ".", exist_ok=True)
        fig.savefig(png)
        if svg:
            fig.savefig(svg, metadata={"Date": None})
    except OSError as e:
        fail(f"{e.filename or png}: {e.strerror}")
    plt.close(fig)


def facet_keys(rows, max_panels=4):
    """The parameters that split an op's cases into panels: varying non-numeric ones (model, mask,
    lengths), fewest values first, while there are at most `max_panels` panels."""
    candidates = []
    for k in varying(rows):
        values = {r["dtype"] for r in rows} if k == "dtype" else {r["params"].get(k) for r in rows}
        if k == "dtype" or not all(isinstance(v, (int, float)) for v in values if v is not None):
            candidates.append((len(values), k))
    keys, panels = [], 1
    for count, k in sorted(candidates):
        if panels * count <= max_panels:
            keys.append(k)
            panels *= count
    return keys


def short_label_keys(rows):
    """The fewest varying parameters that still tell the cases of `rows` apart: one that the others
    determine (heads, given the model) is left out of labels."""
    keys = varying(rows)
    for k in reversed(list(keys)):
        rest = [x for x in keys if x != k]
        if len({label(r, rest) for r in rows}) == len({case_key(r) for r in rows}):
            keys = rest
    return keys


def impl_colors(impls):
    return {impl: f"C{i % 10}" for i, impl in enumerate(impls)}


def impl_label(impl, rows):
    return f"{impl} (baseline)" if any(r["impl"] == impl and r["is_baseline"] for r in rows) else impl


def plain_log_x(ax, values):
    """Log x axis labelled 0.6, 1, 2 rather than 6×10⁻¹; the 2..9 ticks labelled too while the values
    span few enough decades for those labels to stay apart."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ax.set_xscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain if max(values) / min(values) <= 30 else NullFormatter())


def case_chart(plt, rep, op, rows, kind, title, xlabel, value, reference=None, reference_label=None, ratio=False):
    """A dot per implementation and case, at `value(row, the case's ok rows)` -> (x, 95% interval or
    None) or None; cases down the y axis, a panel per model or mask; a dashed line at `reference`.
    The x axis is logarithmic for a `ratio`, and where the values span a decade or more."""
    if len(by_key(rows, case_key)) < 2:
        return rep.skip(op, kind, "it has one case: the table has it")
    impls = list(OrderedDict.fromkeys(r["impl"] for r in rows))
    facets = facet_keys(rows)
    panels = by_key(rows, lambda r: label(r, facets, ", "))
    case_counts = [len(by_key(p, case_key)) for p in panels.values()]
    colors = impl_colors(impls)
    fig, axes = plt.subplots(len(panels), 1, figsize=(15.5, 1.0 + 0.2 * sum(case_counts) + 0.6 * len(panels)),
                             squeeze=False, sharex=True, layout="constrained",
                             gridspec_kw={"height_ratios": [c + 2 for c in case_counts]})
    xs_all = []
    for ax, (panel, panel_rows) in zip(axes[:, 0], panels.items()):
        cases = list(by_key(panel_rows, case_key).values())
        keys = short_label_keys(panel_rows)
        for i, impl in enumerate(impls):
            ys, xs, lo, hi = [], [], [], []
            for y, case_rows in enumerate(cases):
                ok = [r for r in case_rows if is_timed(r)]
                mine = next((r for r in ok if r["impl"] == impl), None)
                point = value(mine, ok) if mine else None
                if point is None or point[0] is None:
                    continue
                x, interval = point
                ys.append(y + (i - (len(impls) - 1) / 2) * 0.8 / len(impls))
                xs.append(x)
                lo.append(max(0.0, x - interval[0]) if interval else 0.0)
                hi.append(max(0.0, interval[1] - x) if interval else 0.0)
            if xs:
                ax.errorbar(xs, ys, xerr=[lo, hi], fmt="o", markersize=3, color=colors[impl], elinewidth=0.8,
                            capsize=1.5, label=impl_label(impl, rows))
                xs_all += xs
        if reference is not None:
            ax.axvline(reference, color="black", linewidth=1, linestyle="--", label=reference_label)
        ax.set_yticks(range(len(cases)), [label(c[0], keys, ", ") or "the one case" for c in cases], fontsize=7)
        ax.set_ylim(len(cases) - 0.5, -0.5)
        ax.set_title(panel or op, fontsize=9, loc="left")
        ax.grid(axis="y", visible=False)
    if not xs_all:
        plt.close(fig)
        return rep.skip(op, kind, "no row has a value")
    span = xs_all + ([reference] if reference else [])
    if ratio or min(span) > 0 and max(span) / min(span) >= 10:
        plain_log_x(axes[-1, 0], span)
    axes[-1, 0].set_xlabel(xlabel)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper")
    fig.suptitle(f"{op}: {title}")
    rep.save(plt, fig, op, kind, f"{op}: {title}")


def speedup_chart(plt, rep, op, rows):
    """Each implementation's speedup over the fastest other implementation of the case."""
    if len({r["impl"] for r in rows}) < 2:
        return rep.skip(op, "speedup", "it has a single implementation")

    def speedup(mine, ok):
        others = fastest([r for r in ok if r["impl"] != mine["impl"]])
        return speedup_over(mine, others) if others else None

    case_chart(plt, rep, op, rows, "speedup", "each implementation against the fastest other one, per case",
               "speedup over the fastest other implementation of the case (×; >1: faster; error bars: 95% "
               "interval of the per-round speedup, where the run measured one against that implementation)",
               speedup, 1.0, ratio=True)


def bandwidth_peak(rows, peaks):
    """The measured DRAM rate the rows' bandwidth is held against: the read rate when every row's
    traffic is reads (bandwidth_ceiling "read") and the run measured it, else the copy rate."""
    if rows and peaks.get("dram_read_GBps") and all(r.get("bandwidth_ceiling") == "read" for r in rows):
        return peaks["dram_read_GBps"], "DRAM read"
    return peaks.get("dram_copy_GBps"), "DRAM copy"


def draw_roofline(ax, rows, peaks, group_of, colors):
    """Achieved TFLOP/s against FLOP per byte, a marker per group, under the two measured roofs.
    Returns False when the rows or the run lack what it needs."""
    (bw, bw_name), compute = bandwidth_peak(rows, peaks), peaks.get("bf16_gemm_TFLOPs")
    pts = [r for r in rows if r["status"] == "ok" and r["flops"] > 0 and r["bytes"] > 0 and r.get("tflops")]
    if not pts or not bw or not compute:
        return False
    intensity = [r["flops"] / r["bytes"] for r in pts]
    ridge = compute * 1e3 / bw  # FLOP/byte where the DRAM slope meets the compute ceiling
    lo, hi = min(min(intensity), ridge) / 4, max(max(intensity), ridge) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(compute, x * bw / 1e3) for x in xs], color="black", linewidth=1.5,
            label=f"measured roofs: {bw:.0f} GB/s {bw_name}, {compute:.0f} TFLOP/s bf16 GEMM")
    for group, mine in by_key(pts, group_of).items():
        ax.scatter([r["flops"] / r["bytes"] for r in mine], [r["tflops"] for r in mine], s=12,
                   color=colors[group], label=group, zorder=3, alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOP / byte of DRAM traffic (op model)")
    ax.set_ylabel("achieved TFLOP/s")
    return True


def roofline_chart(plt, rep, op, rows, peaks):
    fig, ax = plt.subplots(figsize=(10, 4.8), layout="constrained")
    impls = list(OrderedDict.fromkeys(r["impl"] for r in rows))
    colors = {impl_label(i, rows): c for i, c in impl_colors(impls).items()}
    if not draw_roofline(ax, rows, peaks, lambda r: impl_label(r["impl"], rows), colors):
        plt.close(fig)
        return rep.skip(op, "roofline", "its rows declare no FLOPs or bytes, or the run measured no peaks")
    ax.set_title(f"{op}: roofline against the peaks measured in this run")
    fig.legend(loc="outside right upper")
    rep.save(plt, fig, op, "roofline", f"{op}: roofline")


def swept_axis(rows):
    """The numeric parameter with the most distinct values, or None when nothing numeric varies."""
    best, best_count = None, 1
    for key in OrderedDict.fromkeys(k for r in rows for k in r["params"]):
        values = {r["params"].get(key) for r in rows}
        if all(isinstance(v, (int, float)) for v in values) and len(values) > best_count:
            best, best_count = key, len(values)
    return best


def axis_chart(plt, rep, op, rows, kind, ylabel, value, ceiling=None, ceiling_label=None):
    """`value(row)` against the swept axis, a line per impl, a panel per combination of the other
    varying parameters; a dot per case (case_chart) when the lines would be dots."""
    axis = swept_axis(rows)
    rows = [r for r in rows if value(r) is not None]
    if not rows:
        return rep.skip(op, kind, f"no {ylabel} was recorded")
    if axis is None:
        return case_chart(plt, rep, op, rows, kind, f"{ylabel}, per case", ylabel,
                          lambda r, ok: (value(r), None), ceiling, ceiling_label)
    panel_keys = [k for k in short_label_keys(rows) if k != axis]
    panels = by_key(rows, lambda r: label(r, panel_keys, ", "))
    fewest = min(len({r["params"][axis] for r in p}) for p in panels.values())
    if fewest < MIN_POINTS_PER_LINE or len(panels) > MAX_PANELS:  # lines would be dots: a dot per case
        return case_chart(plt, rep, op, rows, kind, f"{ylabel}, per case", ylabel,
                          lambda r, ok: (value(r), None), ceiling, ceiling_label)
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.4 * cols + 2.2, 3.2 * nrows + 0.6), squeeze=False,
                             sharey=True, layout="constrained")
    impls = list(OrderedDict.fromkeys(r["impl"] for r in rows))
    colors = impl_colors(impls)
    xs_all = sorted({r["params"][axis] for r in rows})
    ys_all = [value(r) for r in rows] + ([ceiling] if ceiling else [])
    for ax, (panel, panel_rows) in zip(axes.flat, panels.items()):
        for impl in impls:
            pts = sorted((r["params"][axis], value(r)) for r in panel_rows if r["impl"] == impl)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, color=colors[impl],
                        label=impl_label(impl, rows))
        if ceiling:
            ax.axhline(ceiling, color="black", linewidth=1, linestyle="--", label=ceiling_label)
        if xs_all[0] > 0 and xs_all[-1] / xs_all[0] >= 10:
            ax.set_xscale("log", base=2)
            ticks = [x for i, x in enumerate(xs_all) if i % math.ceil(len(xs_all) / 6) == 0]  # at most 6 labels
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.minorticks_off()
        if min(ys_all) > 0 and max(ys_all) / min(ys_all) >= 10:
            ax.set_yscale("log")
        ax.set_title("\n".join(textwrap.wrap(panel, 50)) or op, fontsize=8)
        ax.set_xlabel(axis)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper")
    fig.suptitle(f"{op}: {ylabel} against {axis}")
    rep.save(plt, fig, op, kind, f"{op}: {ylabel} against {axis}")


def throughput_chart(plt, rep, op, rows, peaks, memory_bound):
    if memory_bound:
        peak, name = bandwidth_peak(rows, peaks)
        axis_chart(plt, rep, op, rows, "throughput", "achieved GB/s", lambda r: r.get("gbps"), peak,
                   f"measured {name} {peak:.0f} GB/s" if peak else None)
    else:
        peak = peaks.get("bf16_gemm_TFLOPs")
        axis_chart(plt, rep, op, rows, "throughput", "achieved TFLOP/s", lambda r: r.get("tflops"), peak,
                   f"measured bf16 GEMM {peak:.0f} TFLOP/s" if peak else None)


def metric_charts(plt, rep, op, rows):
    """One chart per metric the rows report (row["metrics"]) that takes more than one value."""
    names = list(OrderedDict.fromkeys(k for r in rows for k, v in r.get("metrics", {}).items()
                                      if isinstance(v, (int, float)) and not isinstance(v, bool)))
    varying_names = [n for n in names if len({r["metrics"].get(n) for r in rows if n in r["metrics"]}) > 1]
    for name in varying_names[:MAX_METRIC_CHARTS]:
        axis_chart(plt, rep, op, rows, f"metric_{safe(name)}", name, lambda r: r.get("metrics", {}).get(name))
    for name in varying_names[MAX_METRIC_CHARTS:]:
        rep.skip(op, f"metric_{safe(name)}", f"only the first {MAX_METRIC_CHARTS} varying metrics are charted")


def tokens_per_s(row):
    """A decode step's tokens per second: the metric tokens_per_step over the median time."""
    return row["metrics"]["tokens_per_step"] / (median_us(row) * 1e-6)


def tokens_chart(plt, rep, op, rows):
    """Ops whose rows say how many tokens a launch makes (decode_step): tokens/s against batch, a line
    per impl and the floor's tokens/s (read_bound_us, the case's bytes at the measured read rate)
    dashed, a panel per model, weight format and context."""
    rows = [r for r in rows if "tokens_per_step" in r.get("metrics", {}) and "batch" in r["params"]]
    if not rows:
        return
    panel_keys = [k for k in ("model", "hidden", "weights", "context") if k in rows[0]["params"]]
    if "model" in panel_keys:
        panel_keys.remove("hidden")
    panels = by_key(rows, lambda r: label(r, panel_keys, ", "))
    if len(panels) > MAX_PANELS:
        return rep.skip(op, "tokens", f"{len(panels)} model and context panels, more than {MAX_PANELS}")
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.4 * cols + 2.2, 3.2 * nrows + 0.6), squeeze=False,
                             layout="constrained")
    impls = list(OrderedDict.fromkeys(r["impl"] for r in rows))
    colors = impl_colors(impls)
    for ax, (panel, panel_rows) in zip(axes.flat, panels.items()):
        for impl in impls:
            pts = sorted((r["params"]["batch"], tokens_per_s(r)) for r in panel_rows if r["impl"] == impl)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, color=colors[impl],
                        label=impl_label(impl, rows))
        floor = sorted({(r["params"]["batch"], r["params"]["batch"] / (r["metrics"]["read_bound_us"] * 1e-6))
                        for r in panel_rows if r["metrics"].get("read_bound_us")})
        if floor:
            ax.plot([p[0] for p in floor], [p[1] for p in floor], color="black", linewidth=1, linestyle="--",
                    label="floor (weights + KV at the read rate)")
        batches = sorted({r["params"]["batch"] for r in panel_rows})
        if batches[0] > 0 and batches[-1] / batches[0] >= 4:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")  # tokens/s grows with the batch about as the batch does
            ax.set_xticks(batches, [f"{b:g}" for b in batches])
            ax.minorticks_off()
        ax.set_title(panel or op, fontsize=8)
        ax.set_xlabel("batch")
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("tokens/s")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper")
    fig.suptitle(f"{op}: tokens/s against batch")
    rep.save(plt, fig, op, "tokens", f"{op}: tokens/s against batch, and the floor")


def safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class Report:
    def __init__(self, out_dir, name):
        self.out_dir, self.name = out_dir, name
        self.charts, self.skipped = [], []

    def save(self, plt, fig, op, kind, title):
        stem = f"{safe(self.name)}_{safe(op)}_{kind}"
        save(plt, fig, f"{self.out_dir}/{stem}.png", f"{self.out_dir}/{stem}.svg")
        self.charts.append({"op": op, "kind": kind, "title": title, "png": f"{stem}.png", "svg": f"{stem}.svg"})

    def skip(self, op, kind, why):
        self.skipped.append({"op": op, "kind": kind, "why": why})


def charts_command(args):
    doc = load_results(args.results)
    plt = pyplot()
    peaks = doc.get("context", {}).get("measured_peaks") or {}
    ridge = peaks["bf16_gemm_TFLOPs"] * 1e3 / peaks["dram_copy_GBps"] \
        if peaks.get("bf16_gemm_TFLOPs") and peaks.get("dram_copy_GBps") else None
    rep = Report(args.out, args.name)
    for op, all_rows in by_key(doc["results"], lambda r: r["op"]).items():
        rows = [r for r in all_rows if is_timed(r)]
        if not rows:
            rep.skip(op, "any", "no row of it is ok and timed")
            continue
        # Memory-bound ops are judged in GB/s, compute-bound ones in TFLOP/s.
        intensities = sorted(r["flops"] / r["bytes"] for r in rows if r["bytes"] > 0)
        memory_bound = ridge is None or not intensities or intensities[len(intensities) // 2] < ridge
        speedup_chart(plt, rep, op, rows)
        roofline_chart(plt, rep, op, rows, peaks)
        throughput_chart(plt, rep, op, rows, peaks, memory_bound)
        if any("busbw_gbps" in r.get("metrics", {}) for r in rows):  # collective ops: nccl-tests' two charts
            axis_chart(plt, rep, op, rows, "latency", "median time (µs)", median_us)
        metric_charts(plt, rep, op, rows)
        tokens_chart(plt, rep, op, rows)
    json.dump({"charts": rep.charts, "skipped": rep.skipped}, sys.stdout, indent=1)
    print()


# ---- README's charts ---------------------------------------------------------------------------

def headline_chart_specs(gpu, configs):
    """The charts README shows for one GPU folder: [{title, png (relative to README), draw(plt, path)}]."""
    folder = f"reports/{gpu}/headline"
    ops = [(config, op, rows) for config, _, doc in configs
           for op, rows in by_key(doc["results"], lambda r: r["op"]).items() if any(is_ours(r) for r in rows)]
    specs = [{"title": f"{gpu}: ours against the fastest other implementation, every case",
              "png": f"{folder}/speedup.png", "draw": lambda plt, path: summary_speedup_chart(plt, path, gpu, ops)},
             {"title": f"{gpu}: % of the measured ceiling, ours and the fastest other implementation",
              "png": f"{folder}/pct_of_peak.png", "draw": lambda plt, path: summary_bandwidth_chart(plt, path, gpu, ops)}]
    # A panel per op, its cases pooled over configs; the roofs of the config with most of its rows.
    roofline_ops = OrderedDict()
    for _, _, doc in configs:
        peaks = doc.get("context", {}).get("measured_peaks") or {}
        for op, rows in by_key(doc["results"], lambda r: r["op"]).items():
            if any(r["flops"] > 0 for r in rows) and any(is_ours(r) for r in rows):
                pooled, best_peaks, most = roofline_ops.get(op, ([], peaks, 0))
                roofline_ops[op] = (pooled + rows, peaks if len(rows) > most else best_peaks, max(most, len(rows)))
    roofline_ops = [(op, rows, peaks) for op, (rows, peaks, _) in roofline_ops.items()]
    if roofline_ops:
        specs.append({"title": f"{gpu}: roofline per op, ours and the fastest other implementation",
                      "png": f"{folder}/roofline.png",
                      "draw": lambda plt, path: summary_roofline_chart(plt, path, gpu, roofline_ops)})
    return specs


OURS_COLOR, OTHER_COLOR = "C0", "C1"


def best_pairs(rows):
    """(fastest ours row, fastest other row) per case where both are ok."""
    pairs = []
    for case_rows in by_key(rows, case_key).values():
        _, speedup, interval, ours, other = ours_vs_best_other(case_rows)
        if speedup is not None:
            pairs.append((ours, other, speedup, interval))
    return pairs


def summary_speedup_chart(plt, path, gpu, ops):
    """A row per config and op, a dot per case: the fastest ours* over the fastest other implementation."""
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.38 * len(ops)), layout="constrained")
    colors = {"leads": "C2", "ties": "C7", "trails": "C3"}
    seen = set()
    for y, (config, op, rows) in enumerate(ops):
        for ours, other, speedup, interval in best_pairs(rows):
            v = verdict(speedup, interval)
            ax.scatter([speedup], [y + 0.25 * (hash_unit(case_key(ours)) - 0.5)], s=14, color=colors[v], alpha=0.75,
                       label=None if v in seen else f"ours {v}", zorder=3)
            seen.add(v)
    ax.axvline(1.0, color="black", linewidth=1, linestyle="--")
    ax.set_yticks(range(len(ops)), [f"{config}: {op}" for config, op, _ in ops])
    ax.set_ylim(len(ops) - 0.5, -0.5)
    plain_log_x(ax, [p[2] for _, _, rows in ops for p in best_pairs(rows)] + [1.0])
    ax.set_xlabel("speedup of our fastest implementation over the fastest other one in the same case (×, log)")
    ax.set_title(f"{gpu}: every case, ours against the fastest other implementation (>1: ours is faster)")
    fig.legend(loc="outside lower center", ncols=3)
    save(plt, fig, path)


def hash_unit(text):
    """A stable number in [0, 1) per case: spreads a row's dots vertically so that equal speedups stay visible."""
    return (sum(ord(c) * 31 ** i for i, c in enumerate(text[:40])) % 1000) / 1000


def summary_bandwidth_chart(plt, path, gpu, ops):
    """Per config and op, each case's % of the binding measured ceiling for ours and the fastest other."""
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.38 * len(ops)), layout="constrained")
    for y, (config, op, rows) in enumerate(ops):
        pairs = best_pairs(rows)
        for offset, side, color, name in ((-0.15, 0, OURS_COLOR, "ours (fastest ours* per case)"),
                                          (0.15, 1, OTHER_COLOR, "fastest other per case")):
            values = [p[side].get("pct_of_peak") for p in pairs if p[side].get("pct_of_peak") is not None]
            ax.scatter(values, [y + offset] * len(values), s=12, color=color, alpha=0.7,
                       label=name if y == 0 else None, zorder=3)
    ax.set_yticks(range(len(ops)), [f"{config}: {op}" for config, op, _ in ops])
    ax.set_ylim(len(ops) - 0.5, -0.5)
    ax.set_xlim(0, 105)
    ax.axvline(100, color="black", linewidth=1, linestyle="--")
    ax.set_xlabel("pct_of_peak: % of the binding ceiling measured in the same run (DRAM copy rate, read rate "
                  "for read-only ops, or bf16 GEMM rate)")
    ax.set_title(f"{gpu}: how close each case comes to the ceilings measured in its run")
    fig.legend(loc="outside lower center", ncols=2)
    save(plt, fig, path)


def summary_roofline_chart(plt, path, gpu, roofline_ops):
    cols = min(3, len(roofline_ops))
    nrows = math.ceil(len(roofline_ops) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols + 0.4, 3.4 * nrows + 0.8), squeeze=False,
                             layout="constrained")
    colors = {"ours": OURS_COLOR, "fastest other": OTHER_COLOR}
    for ax, (op, rows, peaks) in zip(axes.flat, roofline_ops):
        best = [r for ours, other, _, _ in best_pairs(rows) for r in (ours, other)]
        drawn = draw_roofline(ax, best, peaks, lambda r: "ours" if is_ours(r) else "fastest other", colors)
        ax.set_title(op, fontsize=9)
        if drawn:
            roof = ax.get_lines()[0].get_label().replace("measured roofs: ", "")
            ax.text(0.02, 0.98, roof, transform=ax.transAxes, fontsize=7, va="top")
    for ax in axes.flat[len(roofline_ops):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    keep = [(h, lab) for h, lab in zip(handles, labels) if not lab.startswith("measured roofs")]
    fig.legend([h for h, _ in keep], [lab for _, lab in keep], loc="outside lower center", ncols=2)
    fig.suptitle(f"{gpu}: achieved TFLOP/s against arithmetic intensity, under the roofs measured in each run")
    save(plt, fig, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("charts", help="the charts of one results file (topt report runs this)")
    c.add_argument("results", help="results.json (schema topt.results/1)")
    c.add_argument("--out", required=True, help="folder for the charts")
    c.add_argument("--name", required=True, help="prefix of the chart file names")
    r = sub.add_parser("readme", help="README's results block from every reports/<gpu>/*.json beside it")
    r.add_argument("readme", help="README.md, with the results markers")
    r.add_argument("--check", action="store_true", help="compare only; exit 1 when README is out of date")
    r.add_argument("--no-charts", action="store_true", help="leave the chart files as they are")
    args = ap.parse_args()
    charts_command(args) if args.command == "charts" else readme_command(args)


if __name__ == "__main__":
    main()
