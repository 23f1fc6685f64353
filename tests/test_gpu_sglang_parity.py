"""bench/gpu_sglang.py's parity table on the CPU: the clients' ABBA turns, SGLang's own decode rate and prefill
batches read from the server log inside each client's window, the share of that rate each client reports, each kit
run paired with its neighbouring bench_serving runs, and one row of medians per concurrency from a synthetic run.

    python -m pytest tests/test_gpu_sglang_parity.py -q
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import gpu_sglang as gs  # noqa: E402


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _decode(t: float, running: int, rate: float) -> str:
    return (
        f"[{_stamp(t)}] Decode batch, #running-req: {running}, #token: 500, token usage: 0.01, cuda graph: True, "
        f"gen throughput (token/s): {rate:.2f}, #queue-req: 0"
    )


def test_clients_take_abba_turns():
    assert gs.client_order(1) == ["kit_bench", "bench_serving"]
    assert gs.client_order(2) == ["kit_bench", "bench_serving", "bench_serving", "kit_bench"]
    assert gs.client_order(3)[4:] == ["kit_bench", "bench_serving"]


def test_the_table_gives_medians_and_the_servers_rate_in_each_window():
    t = datetime(2026, 12, 5, 5, 0, 0).timestamp()
    windows = [[t, t + 60], [t + 70, t + 130], [t + 140, t + 200], [t + 210, t + 270]]
    rates = [8000, 7000, 7100, 8100]  # the server itself faster in the kit's windows
    log = ["[2026-12-05 04:59:00] The server is fired up and ready to roll!"]
    for (a, b), rate in zip(windows, rates):
        log += [_decode(x, 16, rate + (x - a)) for x in range(int(a) + 1, int(b), 5)]
    log.append(_decode(t + 65, 3, 99999.0))  # between runs: in no window
    log += [f"[{_stamp(t + 2 + i)}] Prefill batch, #new-seq: {n}, #new-token: 9, #cached-token: 0, #running-req: 9"
            for i, n in enumerate((1, 4))]  # fmt: skip

    def kit(tok_s):
        return {"labels": {"kit": {"output_tok_s": tok_s, "ttft_p50_s": 0.044, "duration_s": 70.0, "prompt_tokens": 9}}}

    def bs(tok_s):
        return {
            "result": {"output_throughput": tok_s, "median_ttft_ms": 52.0, "duration": 80.0, "total_input_tokens": 9}
        }

    doc = {
        "min_seconds": 75.0,
        "runs": {
            "16": {
                "n": 100,
                "order": gs.client_order(2),
                "windows": windows,
                "server_prompt_tokens": [10, 11, 12, 13],
                "client_cpu_s": [40.0, 30.0, 31.0, 42.0],
                "kit_bench": [kit(6700.0), kit(6500.0)],
                "bench_serving": [bs(5900.0), bs(6000.0)],
            }
        },
    }
    (row,) = gs.parity_table(doc, log)
    assert row["order"] == ["kit_bench", "bench_serving", "bench_serving", "kit_bench"]
    assert row["output_tok_s"] == [6600.0, 5950.0]
    assert row["ttft_p50_ms"] == [44.0, 52.0]
    # each run's window holds only its own decode lines; the 99999 line between runs is in none
    kit_runs, bs_runs = row["repeats"]["kit_bench"], row["repeats"]["bench_serving"]
    assert [r["server"]["decode_lines"] for r in kit_runs + bs_runs] == [12, 12, 12, 12]
    assert kit_runs[1]["server"]["gen_tok_s_median"] > 8000 > bs_runs[0]["server"]["gen_tok_s_median"]
    assert row["server_gen_tok_s_median"][0] > row["server_gen_tok_s_median"][1]
    assert kit_runs[0]["server"]["prefill_batches"] == 2 and kit_runs[0]["server"]["new_seq_mean"] == 2.5
    assert bs_runs[0]["server"]["prefill_batches"] == 0 and bs_runs[0]["server"]["new_seq_mean"] is None
    assert kit_runs[1]["prompt_tokens_server"] == 13 and bs_runs[0]["prompt_tokens_server"] == 11
    assert gs.server_window(gs.log_rows(log), t + 1000, t + 2000) == {"decode_lines": 0}
    # the kit's 6700 tok/s over the server's own median in its window (8000 + the median of 1, 6, ... 56 s: 28.5)
    assert kit_runs[0]["served_share"] == round(6700 / 8028.5, 4)
    assert row["served_share"][1] == round(statistics.median([5900 / 7028.5, 6000 / 7128.5]), 3)
    assert row["client_cpu_s"] == [41.0, 30.5] and kit_runs[1]["client_cpu_s"] == 42.0
    # each kit run against its neighbouring bench_serving run: 6700/5900 (turn 1 vs 2), 6500/6000 (turn 4 vs 3)
    assert row["paired"]["output_tok_s"] == {"ratios": [1.1356, 1.0833], "median": 1.1095}
    assert row["paired"]["ttft_p50_ms"]["median"] == round(44.0 / 52.0, 4)
    assert row["short_turns"] == [0, 3]  # the kit's 70 s runs, under the 75 s asked for; bench_serving's 80 s are not


def test_a_kit_run_between_two_bench_serving_runs_is_held_to_their_mean():
    order = ["bench_serving", "kit_bench", "bench_serving", "kit_bench"]
    turns = [{"x": 100.0}, {"x": 110.0}, {"x": 120.0}, {"x": None}]
    assert gs.paired_ratio(order, turns, "x") == {"ratios": [1.0], "median": 1.0}
    assert gs.paired_ratio(["kit_bench", "kit_bench"], [{"x": 1.0}, {"x": 2.0}], "x")["median"] is None


def test_client_cpu_counts_finished_children():
    before = gs.client_cpu_s()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    assert gs.client_cpu_s() > before
