"""Benchmark, sweep and oracle figures (seaborn), each saved as PNG and SVG next to the results.

Every function takes request records (`kit.measure.records.RequestRecord`) or plain rows (a sweep's, a
summary), draws on a `matplotlib.figure.Figure` (no pyplot state: nothing leaks between calls, and it works
headless), saves `<out_dir>/<name>.png` and `.svg`, and returns the figure. The figure carries its own PNG
(`_repr_png_`), so Jupyter shows it whatever the matplotlib backend; `png_bytes(fig)` gives it to an ipywidgets Image.

    accept_length_hist(records, out_dir)      tokens accepted per verify step, per configuration
    per_position_acceptance(records, out_dir) P(draft position i accepted), per configuration
    throughput_speedup(summary, out_dir)      output tok/s per run and speedup with its CI
    payoff(speedups, out_dir)                 per-launch speedup over no speculation: paired ratios, median, CI
    latency_cdfs(records, out_dir)            TTFT / ITL / E2E empirical CDFs (ms)
    sweep_heatmaps(rows, out_dir)             steps x topk -> tok/s and accept length
    expected_vs_observed(rows, out_dir)       oracle vs server accept length, side by side and y = x
    oracle_wiring(results, out_dir)           the oracle's accept length per wiring (notebook 03)
    decode_accept_len(frame, out_dir)         decode-log accept length per launch (notebook 04)
    engine_comparison(rows, out_dir)          tok/s and speedup per launch, one group per engine (GPU demo)

Every figure reads without the code: a title says what is shown, `data` (`describe(...)`) on what; axes carry
units, bars their values. Per-position curves show *how* a draft fails (position 1 already rejected = wiring;
decaying tail = capacity).
"""

from __future__ import annotations

import functools
import io
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kit.measure import metrics as km
from kit.measure.records import RequestRecord


def describe(**facts: Any) -> str:
    """One 'which data' line for a figure title: `describe(model="SmolLM2", prompts="builtin x8")`."""
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in facts.items() if v not in (None, ""))


SCREEN_DPI = 100  # the PNG a notebook shows (files are written at 120 dpi)


def png_bytes(fig, dpi: int = SCREEN_DPI) -> bytes:
    """The figure as PNG bytes (for display, an ipywidgets Image, a report)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


@functools.cache
def _inline_figure_class():
    from matplotlib.figure import Figure

    class InlineFigure(Figure):
        """A Figure that Jupyter displays as a PNG, with no pyplot backend involved."""

        def _repr_png_(self) -> bytes:
            return png_bytes(self)

    return InlineFigure


def _figure(ncols: int = 1, width: float = 5.0, height: float = 3.6):
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook", font_scale=0.85)
    fig = _inline_figure_class()(figsize=(width * ncols, height), layout="constrained")
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def _title(fig, what: str, data: str = "") -> None:
    """Figure title: what is shown (bold), then on which data, wrapped to the figure's width: a first guess of
    the characters per line, narrowed until the rendered title fits (the theme's font decides how wide it is)."""
    from matplotlib.backends.backend_agg import RendererAgg

    renderer = RendererAgg(int(fig.bbox.width), int(fig.bbox.height), fig.dpi)
    width = int(fig.get_figwidth() * 14)
    while True:
        sub = "\n".join(textwrap.wrap(data, width)) if data else ""
        title = fig.suptitle(what + ("\n" + sub if sub else ""), fontsize=10)
        over = title.get_window_extent(renderer).width / (0.98 * fig.bbox.width)
        if over <= 1 or not data or width <= 20:
            return
        width = max(20, int(width / over) - 1)


def _fit_ticks(ax, width: int = 14) -> None:
    """Wrap long x tick labels so they neither overlap nor run off the figure."""
    labels = [t.get_text() for t in ax.get_xticklabels()]
    if any(len(t) > width for t in labels):
        ax.set_xticks(ax.get_xticks())
        ax.set_xticklabels(["\n".join(textwrap.wrap(t, width)) or t for t in labels], fontsize=8)


def _label_bars(ax, fmt: str = "{:.2f}") -> None:
    for c in ax.containers:
        if hasattr(c, "patches"):
            heights = [p.get_height() for p in c.patches]
            ax.bar_label(c, labels=[fmt.format(h) if h == h else "" for h in heights], fontsize=8, padding=2)


def save(fig, out_dir: str | os.PathLike, name: str) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    for p in paths:
        fig.savefig(p, dpi=120)
    return paths


def _done(fig, what: str, data: str, out_dir, name: str):
    """Title the figure (`_title`), save it (`save`), return it."""
    _title(fig, what, data)
    save(fig, out_dir, name)
    return fig


def _empty(msg: str, *axes):
    for ax in axes:
        ax.text(0.5, 0.5, msg, ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.set(xticks=[], yticks=[])


_LABEL_BOX = {"boxstyle": "round", "fc": "white", "ec": "none", "alpha": 0.8}  # a bar's value, readable over it


def _by_label(records: Sequence[RequestRecord]) -> dict[str, list[RequestRecord]]:
    out: dict[str, list[RequestRecord]] = {}
    for r in km.measured(records):
        out.setdefault(r.label or "run", []).append(r)
    return out


def accept_length_hist(records: Sequence[RequestRecord], out_dir, name: str = "accept_length_hist", data: str = ""):
    """Share of verify steps that emitted 1, 2, ... tokens (from spec_correct_drafts_histogram);
    without histograms, the distribution of per-request accept lengths."""
    import pandas as pd
    import seaborn as sns

    fig, (ax,) = _figure()
    rows, per_req = [], []
    for label, recs in _by_label(records).items():
        hist = km.merge_histograms(r.spec.get("histogram") for r in recs)
        tot = sum(hist)
        rows += [
            {"config": label, "tokens per verify step": k + 1, "share": c / tot} for k, c in enumerate(hist) if tot
        ]
        per_req += [{"config": label, "accept length": r.accept_length} for r in recs if r.verify_ct]
    if rows:
        sns.barplot(pd.DataFrame(rows), x="tokens per verify step", y="share", hue="config", ax=ax)
        ax.set(xlabel="tokens emitted per verify step (bonus token included)", ylabel="share of verify steps")
        _label_bars(ax)
        what = "Tokens emitted per verify step"
    elif per_req:
        hist = {"element": "step", "stat": "probability", "common_norm": False}
        sns.histplot(pd.DataFrame(per_req), x="accept length", hue="config", ax=ax, **hist)
        ax.set(xlabel="accept length of one request (tokens per verify step)", ylabel="share of requests")
        what = "Per-request accept length"
    else:
        _empty("no acceptance reported", ax)
        what = "Tokens emitted per verify step"
    return _done(fig, what, data, out_dir, name)


def per_position_acceptance(
    records: Sequence[RequestRecord], out_dir, name: str = "per_position_acceptance", data: str = ""
):
    import pandas as pd
    import seaborn as sns

    fig, (ax,) = _figure()
    rows = []
    for label, recs in _by_label(records).items():
        hist = km.merge_histograms(r.spec.get("histogram") for r in recs)
        rows += [
            {"config": label, "draft position": i + 1, "P(accepted)": p}
            for i, p in enumerate(km.per_position_acceptance(hist))
        ]
    if rows:
        sns.lineplot(pd.DataFrame(rows), x="draft position", y="P(accepted)", hue="config", marker="o", ax=ax)
        ax.set_ylim(0, 1.02)
        ax.set(xlabel="draft position (1 = first drafted token)", ylabel="P(position accepted)")
        ax.set_xticks(sorted({r["draft position"] for r in rows}))
    else:
        _empty("no acceptance histogram reported", ax)
    return _done(fig, "Per-position acceptance (position 1 near 0 = wiring fault)", data, out_dir, name)


def throughput_speedup(
    summary: dict[str, Any],
    out_dir,
    name: str = "throughput_speedup",
    data: str = "",
    speedup: dict[str, dict] | None = None,
):
    """Left: output tok/s per configuration (bars: the summary's pooled figure; dots: repeats). Right: speedup vs
    baseline with its interval: `speedup` ({label: {median, ci95}}), else the summary's `launch_speedup`, else
    (an older summary) the unpaired t-interval."""
    import pandas as pd
    import seaborn as sns

    fig, (ax1, ax2) = _figure(2)
    runs = pd.DataFrame(summary.get("runs") or [])
    if len(runs):
        order = list(dict.fromkeys(runs["label"]))
        pooled = {k: (summary.get("labels") or {}).get(k, {}).get("output_tok_s") for k in order}
        heights = [
            pooled[k] if pooled[k] is not None else runs[runs["label"] == k]["output_tok_s"].mean() for k in order
        ]
        bars = ax1.bar(order, heights, alpha=0.6, color=sns.color_palette()[0])
        ax1.bar_label(bars, fmt="%.1f", fontsize=8, label_type="center")
        sns.stripplot(runs, x="label", y="output_tok_s", order=order, ax=ax1, color="black", size=5)
        ax1.set(xlabel="configuration", ylabel="output tok/s (dots: repeats)")
        _fit_ticks(ax1)
    else:
        _empty("no runs", ax1)
    speedup = speedup or summary.get("launch_speedup")
    if speedup:
        rows = {k: (v["median"], *v["ci95"]) for k, v in speedup.items() if v}
        unsure = {k for k, v in speedup.items() if v and v.get("inconclusive")}
        pairing = {v.get("pairing") for v in speedup.values() if v} - {None}
        kind = (
            f"speedup over no speculation\n(paired per {' / '.join(sorted(pairing)) or 'repeat'}; bars: 95% interval)"
        )
    else:
        rows = {k: (v["speedup"], v["t_low"], v["t_high"]) for k, v in (summary.get("speedup") or {}).items()}
        unsure = set()
        kind = "speedup over no speculation\n(bars: 95% t-interval)"
    if rows:
        labels = list(rows)
        vals = [rows[k][0] for k in labels]
        known = lambda x: x is not None and x == x  # noqa: E731  (no interval: None or NaN)
        lo = [v - rows[k][1] if known(rows[k][1]) else 0 for k, v in zip(labels, vals)]
        hi = [rows[k][2] - v if known(rows[k][2]) else 0 for k, v in zip(labels, vals)]
        colors = ["lightgray" if k in unsure else sns.color_palette()[1] for k in labels]
        bars = ax2.bar(labels, vals, yerr=[lo, hi], capsize=6, color=colors)
        shown = ["inconclusive" if k in unsure else f"{v:.2f}x" for k, v in zip(labels, vals)]
        ax2.bar_label(bars, labels=shown, fontsize=9, label_type="center", bbox=_LABEL_BOX)
        ax2.axhline(1.0, color="gray", ls="--")
        ax2.set_xlabel("configuration")
        ax2.set_ylabel(kind, fontsize=8)  # two short lines within the axes height, clear of the title
        _fit_ticks(ax2)
    else:
        _empty("no baseline arm", ax2)
    return _done(fig, "Output throughput and speedup over the baseline", data, out_dir, name)


def payoff(speedups: dict[str, dict | None], out_dir, name: str = "payoff", data: str = ""):
    """Speedup over the no-speculation baseline per launch (`kit.measure.bench.payoff`, the run's
    `kit.measure.metrics.launch_speedup`): each paired ratio (per repeat, or per request in a one-repeat run) as
    a dot, the median as a bar with its 95% bootstrap interval, 1.0 dashed; a launch whose run cannot support a
    figure (`inconclusive`) is a gray bar labelled so, its dots still shown."""
    import seaborn as sns

    fig, (ax,) = _figure(1, width=6.0, height=4.2)
    names = [k for k, v in speedups.items() if v]
    if names:
        pretty = [f"{k.replace('_', ' ')} ({speedups[k]['label']})" for k in names]
        med = [speedups[k]["median"] for k in names]
        lo = [max(0.0, m - speedups[k]["median_low"]) for k, m in zip(names, med)]
        hi = [max(0.0, speedups[k]["median_high"] - m) for k, m in zip(names, med)]
        unsure = [bool(speedups[k].get("inconclusive")) for k in names]
        colors = [
            "lightgray" if u else sns.color_palette()[2] if m >= 1.0 else sns.color_palette()[3]
            for m, u in zip(med, unsure)
        ]
        bars = ax.bar(range(len(names)), med, yerr=[lo, hi], capsize=8, color=colors, alpha=0.6, width=0.5)
        for i, k in enumerate(names):
            rs = speedups[k]["ratios"]
            ax.scatter([i + 0.3] * len(rs), rs, color="black", s=14, zorder=3)
        shown = [
            "inconclusive\n(the run cannot\nsupport a figure)"
            if u
            else f"{m:.2f}x\n[{speedups[k]['median_low']:.2f}, {speedups[k]['median_high']:.2f}]"
            for k, m, u in zip(names, med, unsure)
        ]
        ax.bar_label(bars, labels=shown, fontsize=9, label_type="center", bbox=_LABEL_BOX)
        ax.set_xticks(range(len(names)), pretty)
        ax.axhline(1.0, color="gray", ls="--")
        ax.set_ylabel("speedup over no speculation")
        pairing = " / ".join(sorted({speedups[k].get("pairing") or "request" for k in names}))
        ax.set_xlabel(f"bars: median with its 95% interval; dots: each {pairing}")
        _fit_ticks(ax, width=22)
    else:
        _empty("no launch was benched against a baseline", ax)
    return _done(fig, "Does speculation pay? Paired speedup over the same server without it", data, out_dir, name)


def latency_cdfs(records: Sequence[RequestRecord], out_dir, name: str = "latency_cdfs", data: str = ""):
    import pandas as pd
    import seaborn as sns

    fig, axes = _figure(3, width=4.2)
    rows = []
    for label, recs in _by_label(records).items():
        for r in recs:
            if r.ttft is not None:
                rows.append({"config": label, "metric": "TTFT (ms)", "value": r.ttft * 1000})
            rows.append({"config": label, "metric": "E2E latency (ms)", "value": r.e2e * 1000})
            rows += [{"config": label, "metric": "ITL (ms)", "value": x * 1000} for x in km.itls(r)]
    df = pd.DataFrame(rows)
    for ax, metric in zip(axes, ("TTFT (ms)", "ITL (ms)", "E2E latency (ms)")):
        sub = df[df["metric"] == metric] if len(df) else df
        if len(sub):
            sns.ecdfplot(sub, x="value", hue="config", ax=ax)
            ax.set(
                xlabel=metric,
                ylabel="share of requests at or below" if metric != "ITL (ms)" else "share of tokens at or below",
            )
        else:
            _empty(f"no {metric}", ax)
    return _done(fig, "Latency distributions (time to first token, inter-token, end to end)", data, out_dir, name)


def sweep_heatmaps(
    rows: Sequence[dict], out_dir, name: str = "sweep_heatmaps", concurrency: int | None = None, data: str = ""
):
    """steps x topk heatmaps of output tok/s and accept length (best draft-token count per cell)."""
    import pandas as pd
    import seaborn as sns

    fig, (ax1, ax2) = _figure(2, width=4.8)
    df = pd.DataFrame(rows)
    if len(df) and "speculative_num_steps" in df:
        df = df[df["speculative_num_steps"] > 0]  # baseline rows have no steps/topk
        if concurrency is None and "concurrency" in df and len(df):
            concurrency = int(df["concurrency"].max())
        if concurrency is not None and "concurrency" in df:
            df = df[df["concurrency"] == concurrency]
    if not len(df) or "speculative_num_steps" not in df:
        _empty("no sweep points", ax1, ax2)
    else:
        for ax, col, fmt, what in (
            (ax1, "output_tok_s", ".0f", "output tokens/s"),
            (ax2, "accept_length", ".2f", "accept length"),
        ):
            piv = df.pivot_table(
                index="speculative_num_steps", columns="speculative_eagle_topk", values=col, aggfunc="max"
            )
            if piv.notna().any().any():
                sns.heatmap(piv, annot=True, fmt=fmt, cmap="viridis", ax=ax, cbar=False)
                ax.set_title(what + " (best --speculative-num-draft-tokens)", fontsize=9)
                ax.set(xlabel="--speculative-eagle-topk", ylabel="--speculative-num-steps")
            else:
                _empty(f"no {what}", ax)
    conc = f"concurrency {concurrency}" if concurrency is not None else ""
    return _done(fig, "Speculative parameter sweep", ", ".join(x for x in (data, conc) if x), out_dir, name)


def expected_vs_observed(rows: Sequence[dict], out_dir, name: str = "expected_vs_observed", data: str = ""):
    """Oracle's expected accept length beside the server's observed one (left), and the same pairs
    against observed = expected (right); wiring faults sit on y = 1. The labels name the expectation's source
    (the rows' `expected_from`, `kit.measure.verdict.expectation_source`: transformers forward, server capture,
    training log)."""
    import seaborn as sns

    from kit.measure.verdict import TRANSFORMERS_FORWARD

    fig, (ax1, ax) = _figure(2, width=4.6, height=4.2)
    pts = [
        r for r in rows if r.get("expected_accept_length") is not None and r.get("observed_accept_length") is not None
    ]
    source = ", ".join(sorted({r.get("expected_from") or TRANSFORMERS_FORWARD for r in pts})) or TRANSFORMERS_FORWARD
    if not pts:
        _empty("no expected/observed pairs", ax1, ax)
    else:
        names = [str(r.get("label") or r.get("config") or i) for i, r in enumerate(pts)]
        xs = [r["expected_accept_length"] for r in pts]
        ys = [r["observed_accept_length"] for r in pts]
        pos = list(range(len(pts)))
        pal = sns.color_palette()
        b1 = ax1.bar([p - 0.2 for p in pos], xs, width=0.4, label=f"expected ({source})", color=pal[0])
        b2 = ax1.bar([p + 0.2 for p in pos], ys, width=0.4, label="observed (server)", color=pal[1])
        for b in (b1, b2):
            ax1.bar_label(b, fmt="%.2f", fontsize=8, padding=2)
        ax1.axhline(1.0, color="red", lw=0.8, ls=":")
        ax1.set_xticks(pos)
        ax1.set_xticklabels(names)
        _fit_ticks(ax1)
        ax1.set(xlabel="configuration", ylabel="accept length (tokens per verify step)")
        ax1.set_ylim(0, max(xs + ys) * 1.2)
        ax1.legend(loc="upper right", fontsize=8)
        top = max(xs + ys) * 1.1
        ax.plot([1, top], [1, top], ls="--", color="gray", label="observed = expected")
        ax.axhline(1.0, color="red", lw=0.8, ls=":", label="no draft token accepted")
        ax.scatter(xs, ys, s=40, zorder=3)
        for n, x, y in zip(names, xs, ys):
            ax.annotate(n, (x, y), fontsize=8, xytext=(4, 4), textcoords="offset points")
        ax.set_xlim(0.9, top)
        ax.set_ylim(0.9, top)
        ax.set(xlabel=f"expected accept length ({source})", ylabel="observed accept length (server)")
        ax.legend(loc="upper left", fontsize=8)
    return _done(fig, f"Expected (oracle on the {source}) vs observed (server) accept length", data, out_dir, name)


def engine_comparison(rows: Sequence[dict], out_dir, name: str = "engine_comparison", data: str = ""):
    """Rows {"engine", "launch", "tok_s", "speedup"} (speedup over that engine's own no-speculation arm):
    output tok/s per launch (left) and the speedup (right), one bar group per engine."""
    import pandas as pd
    import seaborn as sns

    fig, (ax1, ax2) = _figure(2, width=5.2, height=3.8)
    df = pd.DataFrame([r for r in rows if r.get("tok_s") is not None])
    sp = df.dropna(subset=["speedup"]) if "speedup" in df else df.iloc[0:0]
    for ax, frame, col, fmt, what in ((ax1, df, "tok_s", "{:.0f}", "output tok/s"),
                                      (ax2, sp, "speedup", "{:.2f}x", "speedup over no speculation")):  # fmt: skip
        if not len(frame):
            _empty("no throughput" if col == "tok_s" else "no speedups", ax)
            continue
        sns.barplot(frame, x="engine", y=col, hue="launch", ax=ax, errorbar=None)
        _label_bars(ax, fmt)
        ax.set(xlabel="engine", ylabel=what)
        if col == "speedup":
            ax.axhline(1.0, color="gray", ls="--")
    return _done(fig, "Speculation on real SGLang beside the kit's engine", data, out_dir, name)


def oracle_wiring(results: dict[str, dict], out_dir, name: str = "03_oracle_wiring", data: str = ""):
    """The oracle's accept length for each wiring it replayed ({wiring label: {"accept_length", ...}}):
    the correct EAGLE-3 wiring beside the seed's faults."""
    import seaborn as sns

    fig, (ax,) = _figure(width=max(5.0, 1.3 * len(results) + 2), height=3.8)
    if not results:
        _empty("no oracle results", ax)
    else:
        names = list(results)
        vals = [float(results[n]["accept_length"]) for n in names]
        bars = ax.bar(names, vals, color=sns.color_palette()[: len(names)])
        ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
        ax.axhline(1.0, color="grey", linestyle="--", label="1.0 = no draft token accepted")
        ax.set(xlabel="wiring replayed by the oracle", ylabel="accept length (bonus included)")
        ax.set_ylim(0, max(vals) * 1.2)
        ax.legend(loc="upper right", fontsize=8)
        _fit_ticks(ax)
    return _done(fig, "Offline oracle: accept length per wiring", data, out_dir, name)


def decode_accept_len(frame, out_dir, name: str = "04_accept_len", data: str = ""):
    """Accept length of each decode-log interval, one line per launch (columns interval, launch, accept_len)."""
    fig, (ax,) = _figure(width=7.0, height=3.6)
    if frame is None or not len(frame):
        _empty("no decode log lines", ax)
    else:
        for launch, sub in frame.groupby("launch", sort=False):
            ax.plot(sub["interval"], sub["accept_len"], marker="o", label=str(launch))
        ax.axhline(1.0, color="grey", linestyle="--", lw=0.8)
        ax.set(xlabel="decode-log interval (one 'Decode batch' line each)", ylabel="accept len (decode log)")
        ax.legend(fontsize=8)
    return _done(fig, "Decode-log acceptance per launch", data, out_dir, name)


def bench_figures(result, out_dir, data: str | None = None) -> dict[Path, Any]:
    """All figures of one kit.measure.bench result, each drawn and saved once: {its PNG path: the figure}
    (display the figures, record the paths). `data` defaults to the run's own description (`result.describe()`)."""
    data = result.describe() if data is None else data
    figures = ((accept_length_hist, result.records), (per_position_acceptance, result.records),
               (throughput_speedup, result.summary), (latency_cdfs, result.records))  # fmt: skip
    return {Path(out_dir) / f"{fn.__name__}.png": fn(arg, out_dir, data=data) for fn, arg in figures}
