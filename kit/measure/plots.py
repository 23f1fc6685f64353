"""Benchmark and sweep figures (seaborn), each saved as PNG and SVG next to the results.

Every function takes plain records / rows (what kit.measure.bench and kit.measure.sweep write), draws on a
`matplotlib.figure.Figure` (no pyplot state, so nothing leaks between calls and it works
headless with the Agg canvas and inline in Jupyter, where the returned figure displays), saves
`<out_dir>/<name>.png` and `.svg`, and returns the figure.

    accept_length_hist(records, out_dir)      tokens accepted per verify step, per configuration
    per_position_acceptance(records, out_dir) P(draft position i accepted), per configuration
    throughput_speedup(summary, out_dir)      output tok/s per run and speedup with its CI
    latency_cdfs(records, out_dir)            TTFT / ITL / E2E empirical CDFs
    sweep_heatmaps(rows, out_dir)             steps x topk -> tok/s and accept length
    expected_vs_observed(rows, out_dir)       oracle vs server accept length, y = x reference

Figures answer "is speculation paying off and where": histograms and per-position curves
show *how* a draft fails (position 1 already rejected = wiring; decaying tail = capacity).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kit.measure import metrics as km


def _figure(ncols: int = 1, width: float = 5.0, height: float = 3.6):
    import seaborn as sns
    from matplotlib.figure import Figure

    sns.set_theme(style="whitegrid", context="notebook")
    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def save(fig, out_dir: str | os.PathLike, name: str) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    for p in paths:
        fig.savefig(p, dpi=120)
    return paths


def _empty(ax, msg: str):
    ax.text(0.5, 0.5, msg, ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def _by_label(records: Sequence[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in km.measured(records):
        out.setdefault(r.get("label", "run"), []).append(r)
    return out


def accept_length_hist(records: Sequence[dict], out_dir, name: str = "accept_length_hist"):
    """Share of verify steps that emitted 1, 2, ... tokens (from spec_correct_drafts_histogram);
    without histograms, the distribution of per-request accept lengths."""
    import pandas as pd
    import seaborn as sns

    fig, (ax,) = _figure()
    rows, per_req = [], []
    for label, recs in _by_label(records).items():
        hist = km.merge_histograms((r.get("spec") or {}).get("histogram") for r in recs)
        tot = sum(hist)
        rows += [
            {"config": label, "tokens per verify step": k + 1, "share": c / tot} for k, c in enumerate(hist) if tot
        ]
        per_req += [
            {"config": label, "accept length": km.output_tokens(r) / r["spec"]["verify_ct"]}
            for r in recs
            if (r.get("spec") or {}).get("verify_ct")
        ]
    if rows:
        sns.barplot(pd.DataFrame(rows), x="tokens per verify step", y="share", hue="config", ax=ax)
        ax.set_title("accepted tokens per verify step (bonus included)")
    elif per_req:
        sns.histplot(
            pd.DataFrame(per_req),
            x="accept length",
            hue="config",
            ax=ax,
            element="step",
            stat="probability",
            common_norm=False,
        )
        ax.set_title("per-request accept length")
    else:
        _empty(ax, "no acceptance reported")
    save(fig, out_dir, name)
    return fig


def per_position_acceptance(records: Sequence[dict], out_dir, name: str = "per_position_acceptance"):
    import pandas as pd
    import seaborn as sns

    fig, (ax,) = _figure()
    rows = []
    for label, recs in _by_label(records).items():
        hist = km.merge_histograms((r.get("spec") or {}).get("histogram") for r in recs)
        rows += [
            {"config": label, "draft position": i + 1, "P(accepted)": p}
            for i, p in enumerate(km.per_position_acceptance(hist))
        ]
    if rows:
        sns.lineplot(pd.DataFrame(rows), x="draft position", y="P(accepted)", hue="config", marker="o", ax=ax)
        ax.set_ylim(0, 1.02)
        ax.set_title("per-position acceptance")
    else:
        _empty(ax, "no acceptance histogram reported")
    save(fig, out_dir, name)
    return fig


def throughput_speedup(summary: dict[str, Any], out_dir, name: str = "throughput_speedup"):
    """Left: output tok/s of every run per configuration. Right: speedup vs baseline with t-CI."""
    import pandas as pd
    import seaborn as sns

    fig, (ax1, ax2) = _figure(2)
    runs = pd.DataFrame(summary.get("runs") or [])
    if len(runs):
        sns.barplot(runs, x="label", y="output_tok_s", ax=ax1, errorbar=None, alpha=0.6)
        sns.stripplot(runs, x="label", y="output_tok_s", ax=ax1, color="black", size=5)
        ax1.set_title("output tokens/s (dots: repeats)")
    else:
        _empty(ax1, "no runs")
    sp = summary.get("speedup") or {}
    if sp:
        labels = list(sp)
        vals = [sp[k]["speedup"] for k in labels]
        lo = [sp[k]["speedup"] - sp[k]["t_low"] if sp[k]["t_low"] == sp[k]["t_low"] else 0 for k in labels]
        hi = [sp[k]["t_high"] - sp[k]["speedup"] if sp[k]["t_high"] == sp[k]["t_high"] else 0 for k in labels]
        ax2.bar(labels, vals, yerr=[lo, hi], capsize=6, color=sns.color_palette()[1])
        ax2.axhline(1.0, color="gray", ls="--")
        ax2.set_ylabel("speedup vs baseline")
        ax2.set_title("speedup (95% t-interval over repeats)")
    else:
        _empty(ax2, "no baseline arm")
    save(fig, out_dir, name)
    return fig


def latency_cdfs(records: Sequence[dict], out_dir, name: str = "latency_cdfs"):
    import pandas as pd
    import seaborn as sns

    fig, axes = _figure(3, width=4.2)
    rows = []
    for label, recs in _by_label(records).items():
        for r in recs:
            if r.get("ttft") is not None:
                rows.append({"config": label, "metric": "TTFT (s)", "value": r["ttft"]})
            rows.append({"config": label, "metric": "E2E latency (s)", "value": r["e2e"]})
            rows += [{"config": label, "metric": "ITL (s)", "value": x} for x in km.itls(r)]
    df = pd.DataFrame(rows)
    for ax, metric in zip(axes, ("TTFT (s)", "ITL (s)", "E2E latency (s)")):
        sub = df[df["metric"] == metric] if len(df) else df
        if len(sub):
            sns.ecdfplot(sub, x="value", hue="config", ax=ax)
            ax.set_xlabel(metric)
        else:
            _empty(ax, f"no {metric}")
    save(fig, out_dir, name)
    return fig


def sweep_heatmaps(rows: Sequence[dict], out_dir, name: str = "sweep_heatmaps", concurrency: int | None = None):
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
        _empty(ax1, "no sweep points")
        _empty(ax2, "no sweep points")
    else:
        for ax, col, fmt in ((ax1, "output_tok_s", ".0f"), (ax2, "accept_length", ".2f")):
            piv = df.pivot_table(
                index="speculative_num_steps", columns="speculative_eagle_topk", values=col, aggfunc="max"
            )
            if piv.notna().any().any():
                sns.heatmap(piv, annot=True, fmt=fmt, cmap="viridis", ax=ax, cbar=False)
                ax.set_title(f"{col} (concurrency {concurrency})")
            else:
                _empty(ax, f"no {col}")
    save(fig, out_dir, name)
    return fig


def expected_vs_observed(rows: Sequence[dict], out_dir, name: str = "expected_vs_observed"):
    """Oracle's expected accept length vs the server's observed one; wiring faults sit on y = 1."""
    fig, (ax,) = _figure(width=4.6, height=4.2)
    pts = [
        r for r in rows if r.get("expected_accept_length") is not None and r.get("observed_accept_length") is not None
    ]
    if not pts:
        _empty(ax, "no expected/observed pairs")
    else:
        xs = [r["expected_accept_length"] for r in pts]
        ys = [r["observed_accept_length"] for r in pts]
        top = max(xs + ys) * 1.1
        ax.plot([1, top], [1, top], ls="--", color="gray", label="observed = expected")
        ax.axhline(1.0, color="red", lw=0.8, ls=":", label="no draft token accepted")
        ax.scatter(xs, ys, s=40, zorder=3)
        for r, x, y in zip(pts, xs, ys):
            ax.annotate(
                str(r.get("label") or r.get("config") or ""),
                (x, y),
                fontsize=8,
                xytext=(4, 4),
                textcoords="offset points",
            )
        ax.set_xlim(0.9, top)
        ax.set_ylim(0.9, top)
        ax.set_xlabel("expected accept length (oracle)")
        ax.set_ylabel("observed accept length (server)")
        ax.legend(loc="upper left", fontsize=8)
    save(fig, out_dir, name)
    return fig


def bench_figures(result, out_dir) -> list[Path]:
    """All figures of one kit.measure.bench result; returns the PNG paths."""
    out = []
    for fn, arg in (
        (accept_length_hist, result.records),
        (per_position_acceptance, result.records),
        (throughput_speedup, result.summary),
        (latency_cdfs, result.records),
    ):
        fn(arg, out_dir)
        out.append(Path(out_dir) / f"{fn.__name__}.png")
    return out
