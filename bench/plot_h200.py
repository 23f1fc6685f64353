"""Figure and table of the real-SGLang matrix: observed accept length (every source SGLang offers) beside the
kit's expected value (oracle scored on SGLang's own text), one group per row; rows SGLang refused are marked.

    python bench/plot_h200.py docs/results/h200_matrix_scored.json docs/h200_matrix.png   # prints the markdown table
"""

from __future__ import annotations

import json
import sys


def main(argv=None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    src, dst = (argv or sys.argv[1:])[:2]
    rows = json.loads(open(src).read())
    names = [n for n in rows if n != "baseline"]
    series = [
        (
            "completion/verify (meta_info, pooled)",
            lambda r: (r.get("observed") or {}).get("pooled_completion_over_verify"),
        ),
        ("mean spec_accept_length", lambda r: (r.get("observed") or {}).get("mean_spec_accept_length")),
        ("/server_info avg", lambda r: (r.get("observed") or {}).get("server_info_avg")),
        ("log 'accept len'", lambda r: (r.get("observed") or {}).get("log_accept_len_mean")),
        ("kit oracle on SGLang's text", lambda r: (r.get("expected") or {}).get("meta_accept_length")),
    ]
    fig, ax = plt.subplots(figsize=(11, 4.2))
    w = 0.8 / len(series)
    for j, (label, get) in enumerate(series):
        xs = [i + (j - (len(series) - 1) / 2) * w for i in range(len(names))]
        ys = [get(rows[n]) or 0 for n in names]
        ax.bar(xs, ys, w, label=label, hatch="//" if "oracle" in label else None)
    for i, n in enumerate(names):
        if not rows[n].get("started"):
            ax.text(i, 0.05, "SGLang did\nnot start", ha="center", va="bottom", fontsize=8, rotation=90)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("accept length (tokens / verify step)")
    ax.set_ylim(0, max(2.0, ax.get_ylim()[1]))
    ax.axhline(1.0, color="grey", lw=0.6)
    ax.legend(fontsize=7, ncol=3, loc="upper right")
    ax.set_title("Real SGLang 0.5.17 on one H200 (bf16, 24 prompts x 128 tokens) vs the kit's prediction", fontsize=10)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)
    print(table(rows))
    return 0


def _f(x, nd=3):
    return "–" if x is None else f"{x:.{nd}f}"


def table(rows: dict) -> str:
    """Markdown: doctor's static verdict, SGLang's start, observed sources, expected, gap (pooled vs meta)."""
    out = [
        "| row | `kit doctor` before launch (errors) | SGLang 0.5.17 | completion/verify | mean spec_accept_length "
        "| /server_info | log | kit expected (meta / walk) | gap |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        d = r.get("doctor") or {}
        doc = "; ".join(e.split(": ", 1)[0] for e in d.get("errors", [])) or "no error"
        if d.get("warnings"):
            doc += " (warn: " + "; ".join(w.split(": ", 1)[0] for w in d["warnings"]) + ")"
        o, e = r.get("observed") or {}, r.get("expected") or {}
        if not r.get("started"):
            err = (r.get("start_error") or ["?"])[-1].strip().replace("`", "'")
            out.append(f"| {name} | {doc} | **did not start**: `{err[:110]}` | – | – | – | – | – | – |")
            continue
        pooled, meta = o.get("pooled_completion_over_verify"), e.get("meta_accept_length")
        gap = f"{100 * (pooled - meta) / meta:+.1f}%" if pooled and meta else "–"
        out.append(
            f"| {name} | {doc} | served | {_f(pooled)} | {_f(o.get('mean_spec_accept_length'))} | "
            f"{_f(o.get('server_info_avg'))} | {_f(o.get('log_accept_len_mean'))} | "
            f"{_f(meta)} / {_f(e.get('accept_length'))} | {gap} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
