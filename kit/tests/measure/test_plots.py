"""kit.measure.plots: every figure is saved as PNG + SVG and draws the numbers it is given."""

import pytest

from kit.measure import plots
from kit.measure.records import RequestRecord


def _rec(label, hist, e2e=1.0, verify=4, toks=10):
    return RequestRecord(
        ok=True,
        label=label,
        repeat=0,
        api="sglang",
        t_start=0.0,
        e2e=e2e,
        ttft=0.1,
        chunk_t=[0.1, 0.4, 0.7, 1.0],
        chunk_tok=[1, 3, 3, 3],
        completion_tokens=toks,
        client_tokens=toks,
        spec={"verify_ct": verify, "histogram": hist} if hist else {},
    )


RECORDS = [_rec("baseline", None), _rec("3-1-4", [4, 3, 2, 1]), _rec("3-1-4", [0, 0, 0, 0])]
SUMMARY = {
    "runs": [{"label": "baseline", "repeat": i, "output_tok_s": 10.0 + i} for i in range(2)]
    + [{"label": "3-1-4", "repeat": i, "output_tok_s": 20.0 + i} for i in range(2)],
    "speedup": {"3-1-4": {"speedup": 1.95, "t_low": 1.8, "t_high": 2.1}},
}


def _saved(tmp_path, name):
    for ext in ("png", "svg"):
        p = tmp_path / f"{name}.{ext}"
        assert p.exists() and p.stat().st_size > 1000, p


def test_acceptance_figures(tmp_path):
    fig = plots.per_position_acceptance(RECORDS, tmp_path)
    _saved(tmp_path, "per_position_acceptance")
    (line,) = [ln for ln in fig.axes[0].lines if len(ln.get_ydata()) == 3]
    assert list(line.get_ydata()) == pytest.approx([0.6, 0.3, 0.1])
    fig = plots.accept_length_hist(RECORDS, tmp_path)
    _saved(tmp_path, "accept_length_hist")
    heights = sorted(round(p.get_height(), 3) for p in fig.axes[0].patches if p.get_height() > 0)
    assert heights == [0.1, 0.2, 0.3, 0.4]


def test_throughput_latency_sweep_expected(tmp_path):
    plots.throughput_speedup(SUMMARY, tmp_path)
    plots.latency_cdfs(RECORDS, tmp_path)
    rows = [
        {
            "speculative_num_steps": s,
            "speculative_eagle_topk": k,
            "speculative_num_draft_tokens": s * k + 1,
            "concurrency": 1,
            "output_tok_s": 10.0 * s + k,
            "accept_length": 1 + 0.3 * s,
        }
        for s in (1, 3)
        for k in (1, 4)
    ]
    fig = plots.sweep_heatmaps(
        rows
        + [
            {
                "speculative_num_steps": 0,
                "speculative_eagle_topk": 0,
                "speculative_num_draft_tokens": 0,
                "concurrency": 1,
                "output_tok_s": 5.0,
                "accept_length": None,
            }
        ],
        tmp_path,
    )
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {"11", "14", "31", "34"} <= texts
    fig = plots.expected_vs_observed(
        [{"label": "3-1-4", "expected_accept_length": 2.4, "observed_accept_length": 1.0}], tmp_path
    )
    assert fig.axes[1].collections[0].get_offsets().tolist() == [[2.4, 1.0]]
    # expected and observed side by side, each bar labelled with its value
    assert sorted(round(p.get_height(), 2) for p in fig.axes[0].patches) == [1.0, 2.4]
    assert {"2.40", "1.00"} <= {t.get_text() for t in fig.axes[0].texts}
    for name in ("throughput_speedup", "latency_cdfs", "sweep_heatmaps", "expected_vs_observed"):
        _saved(tmp_path, name)


def test_throughput_figure_quotes_the_numbers_a_report_quotes(tmp_path):
    """Bars: the summary's pooled tok/s per label; right panel: the paired speedup when given."""
    summary = {**SUMMARY, "labels": {"baseline": {"output_tok_s": 10.2}, "3-1-4": {"output_tok_s": 20.7}}}
    fig = plots.throughput_speedup(summary, tmp_path)
    assert {"10.2", "20.7"} <= {t.get_text() for t in fig.axes[0].texts}
    assert "1.95x" in {t.get_text() for t in fig.axes[1].texts}  # unpaired t-interval without `speedup`
    fig = plots.throughput_speedup(summary, tmp_path, speedup={"3-1-4": {"median": 2.03, "ci95": [1.9, 2.2]}})
    assert "2.03x" in {t.get_text() for t in fig.axes[1].texts} and "paired" in fig.axes[1].get_ylabel()


def test_empty_inputs_still_save(tmp_path):
    plots.per_position_acceptance([], tmp_path)
    plots.sweep_heatmaps([], tmp_path)
    plots.expected_vs_observed([], tmp_path)
    plots.throughput_speedup({}, tmp_path)
    for name in ("per_position_acceptance", "sweep_heatmaps", "expected_vs_observed", "throughput_speedup"):
        _saved(tmp_path, name)


DATA = "model SmolLM2-135M, prompts builtin x8, 32 new tokens, concurrency 2"


def _labels_read(fig):
    for ax in fig.axes:
        if len(ax.get_xticks()):  # an empty panel hides its axes
            assert ax.get_xlabel() not in ("", "None") and ax.get_ylabel() not in ("", "None"), ax


def test_every_figure_says_what_and_on_which_data(tmp_path):
    rows = [
        {
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 1,
            "concurrency": 1,
            "output_tok_s": 12.0,
            "accept_length": 2.1,
        }
    ]
    figs = {
        "hist": plots.accept_length_hist(RECORDS, tmp_path, data=DATA),
        "pos": plots.per_position_acceptance(RECORDS, tmp_path, data=DATA),
        "tput": plots.throughput_speedup(SUMMARY, tmp_path, data=DATA),
        "lat": plots.latency_cdfs(RECORDS, tmp_path, data=DATA),
        "sweep": plots.sweep_heatmaps(rows, tmp_path, data=DATA),
        "eo": plots.expected_vs_observed(
            [{"label": "3-1-4", "expected_accept_length": 2.4, "observed_accept_length": 1.0}], tmp_path, data=DATA
        ),
    }
    for name, fig in figs.items():
        title = fig._suptitle.get_text()
        assert title.split("\n")[0] and DATA.split(",")[0] in title, name
        _labels_read(fig)
    assert figs["lat"].axes[0].get_xlabel() == "TTFT (ms)"
    speed_texts = {t.get_text() for t in figs["tput"].axes[1].texts}
    assert "1.95x" in speed_texts  # the value is written on its bar


def test_oracle_wiring_figure_names_its_axis_and_values(tmp_path):
    res = {
        "EAGLE3 (correct)": {"accept_length": 2.31},
        "EAGLE (seed: no aux capture)": {"accept_length": 1.02},
        "layers shifted by one": {"accept_length": 1.4},
    }
    fig = plots.oracle_wiring(res, tmp_path, data="target embedded, draft demo")
    _saved(tmp_path, "03_oracle_wiring")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "wiring replayed by the oracle"
    assert {"2.31", "1.02", "1.40"} <= {t.get_text() for t in ax.texts}
    assert all(len(line) <= 14 for t in ax.get_xticklabels() for line in t.get_text().split("\n"))
    assert "Offline oracle" in fig._suptitle.get_text() and "draft demo" in fig._suptitle.get_text()


def test_decode_accept_len_figure(tmp_path):
    import pandas as pd

    frame = pd.DataFrame(
        {"interval": [0, 1, 0, 1], "launch": ["seed", "seed", "fixed", "fixed"], "accept_len": [1.0, 1.0, 2.2, 2.4]}
    )
    fig = plots.decode_accept_len(frame, tmp_path, data="engine reference")
    _saved(tmp_path, "04_accept_len")
    assert len(fig.axes[0].lines) >= 2 and fig.axes[0].get_xlabel().startswith("decode-log interval")


def test_payoff_shows_each_launch_median_interval_and_requests(tmp_path):
    from kit.measure import metrics as km

    fixed, seed = [1.3, 1.5, 1.6, 1.7, 1.45, 1.9], [0.9, 0.95, 0.97, 1.0, 0.93, 0.91]
    sp = {
        "fixed_launch": {**km.paired_speedup(fixed), "label": "EAGLE3 2-1-3", "ratios": fixed},
        "seed_launch": {**km.paired_speedup(seed), "label": "EAGLE 2-1-3", "ratios": seed},
    }
    fig = plots.payoff(sp, tmp_path)
    ax = fig.axes[0]
    assert [round(p.get_height(), 3) for p in ax.patches] == [round(sp["fixed_launch"]["median"], 3), 0.94]
    assert sum(len(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets")) >= 12  # every request
    assert any(t.get_text().startswith("1.55x") for t in ax.texts)
    _saved(tmp_path, "payoff")
    plots.payoff({"fixed_launch": None}, tmp_path / "none")  # no baseline: an empty figure, still saved
    _saved(tmp_path / "none", "payoff")


def test_a_long_title_is_wrapped_inside_its_figure(tmp_path):
    """The data line of a title (a demo's: model, prompts, tokens, concurrency, repeats, api) is wrapped to what the
    figure's width holds in the theme's font, never cut off at the figure's edges in the saved PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    data = "model embedded, prompts builtin x18, 32 new tokens, temperature 0.0, concurrency 1, 1 repeat(s), api sglang"
    sp = {"fixed_launch": {"median": 1.6, "median_low": 1.3, "median_high": 1.8, "ratios": [1.3, 1.8], "label": "x"}}
    for fig in (plots.payoff(sp, tmp_path, data=data), plots.latency_cdfs(RECORDS, tmp_path, data=data)):
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        box = fig._suptitle.get_window_extent(canvas.get_renderer())
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width, fig._suptitle.get_text()
        assert "api sglang" in fig._suptitle.get_text()


def test_figures_display_as_png_in_jupyter(tmp_path):
    """IPython formats a returned figure as image/png with no pyplot backend activated (JupyterLab then
    shows a picture, not `<Figure size ... with 1 Axes>`)."""
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    fig = plots.per_position_acceptance(RECORDS, tmp_path)
    data, _ = InteractiveShell.instance().display_formatter.format(fig)
    assert data["image/png"][:4] == b"\x89PNG"
    assert plots.png_bytes(fig)[:4] == b"\x89PNG"
