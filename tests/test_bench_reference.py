"""kit.measure.bench + kit.measure.sweep's real launcher against the kit's CPU reference server (kit.refserver.server):
real greedy EAGLE-3 decoding of the embedded SmolLM2 with the shipped demo draft, started through
kit.serving.launch + kit.serving.process exactly as a sweep point is.

Checks that every acceptance source the server exposes agrees (per-request meta_info, /metrics
counter deltas, /server_info, decode log lines, streamed chunk sizes), for the fixed EAGLE3 launch
and for the seed's `--speculative-algorithm EAGLE` launch of the same draft (which accepts less).
"""

import pytest

from kit.measure.bench import BenchConfig, run_bench
from kit.measure.sweep import spec_launcher
from kit.serving.launch import LaunchSpec
from kit.sglang.params import SpecParams

pytestmark = pytest.mark.slow


def test_sources_agree_on_fixed_and_seed_launch(tmp_path, shipped_draft):
    draft = str(shipped_draft)
    base = LaunchSpec(
        model_path="embedded", speculative_algorithm="EAGLE3", speculative_draft_model_path=draft, decode_log_interval=2
    )
    point = SpecParams(3, 1, 4)
    observed = {}
    for algo in ("EAGLE3", "EAGLE"):
        launch = spec_launcher(base.replace(speculative_algorithm=algo), "reference", str(tmp_path / algo))
        with launch(point) as srv:
            res = run_bench(
                BenchConfig(
                    url=srv.url,
                    label=algo,
                    num_prompts=2,
                    max_new_tokens=8,
                    concurrency=2,
                    warmup=1,
                    chat_template="embedded",
                    log_path=srv.log_file,
                    out_dir=str(tmp_path / f"b_{algo}"),
                    progress=False,
                )
            )
        agg = res.summary["labels"][algo]
        assert agg["requests"] == 2 and agg["failed"] == 0
        src = agg["accept_sources"]
        assert {"meta", "meta_field", "metrics_delta", "server_info", "stream"} <= set(src)
        assert not res.report.by_code("bench.accept_mismatch"), res.report.render_text()
        assert src["metrics_delta"] == pytest.approx(src["meta"], rel=1e-6)
        observed[algo] = agg["accept_length"]
    assert observed["EAGLE3"] >= observed["EAGLE"] >= 1.0  # the seed's launch skips fc: accepts less
