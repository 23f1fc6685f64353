"""bench/gpu_breakeven.py on the CPU: its dry run (model dirs, the launch lines of all servers), the cost of one
streamed request, and the analysis of a measured document (its numbers made up here).

    python -m pytest tests/test_gpu_breakeven.py -q
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import gpu_breakeven as gb  # noqa: E402

from kit.measure.records import RequestRecord  # noqa: E402

SMOLLM2 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "intermediate_size": 1536,
           "vocab_size": 49152, "tie_word_embeddings": True, "_model_name_or_path": "x"}  # fmt: skip


@pytest.fixture
def embedded(tmp_path, monkeypatch):
    """A stand-in for the converted embedded target: its config and tokenizer files, no weights."""
    from kit.sglang.bundle import RELEASES

    d = tmp_path / "embedded"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(SMOLLM2))
    (d / "tokenizer.json").write_text("{}")
    monkeypatch.setattr("kit.models.embedded_dir", lambda: d)
    monkeypatch.setattr("kit.sglang.bundle_site.installed_bundle_flags", lambda: list(RELEASES["0.5.17"].launch_flags))
    return d


def _config_only_draft(out, target, draft_vocab_size):
    """`gb.write_draft` without its weights (the 7B-wide draft is 1.1 GB): the config it would write."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = {"hidden_size": target["hidden_size"], "draft_vocab_size": draft_vocab_size,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": gb.aux_ids(target["num_hidden_layers"])}}  # fmt: skip
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def test_dry_run_builds_every_dir_and_launch_line_and_starts_nothing(tmp_path, embedded, monkeypatch):
    from kit.models import shipped_draft

    monkeypatch.setattr(gb, "write_draft", _config_only_draft)
    out = tmp_path / "out"
    assert gb.main(["--work", str(tmp_path / "w"), "--out", str(out), "--dry-run"]) == 0
    doc = json.loads((out / "breakeven.json").read_text())
    assert [p.name for p in out.iterdir()] == ["breakeven.json"]
    assert doc["dry_run"] and doc["errors"] == []
    # the recorded demo's accept length and paired speedup are the defaults
    assert doc["inputs"]["accept_length"] == pytest.approx(2.1709, abs=1e-4)
    assert doc["inputs"]["measured_speedup"] == pytest.approx(0.9317, abs=1e-4)
    cmds = doc["commands"]
    assert list(cmds) == ["135m_baseline", "135m_eagle3", "135m_eagle3_probe", "360m_baseline", "360m_eagle3",
                          "1.7b_baseline", "1.7b_eagle3", "7b_baseline", "7b_eagle3"]  # fmt: skip
    ports = [c.split("--port ")[1].split()[0] for c in cmds.values()]
    nccl = [c.split("--nccl-port ")[1].split()[0] for c in cmds.values()]
    assert len(set(ports + nccl)) == 2 * len(cmds)
    from kit.sglang.flags import table_for

    options = table_for("0.5.17").by_option()
    for name, c in cmds.items():
        assert [t for t in c.split() if t.startswith("--") and t not in options] == []  # all 0.5.17's own
        assert "--attention-backend triton" in c and "--cuda-graph-max-bs-decode 4" in c and "--sleep-on-idle" in c
        assert "--mem-fraction-static 0.85" in c and "--tp-size" not in c
        assert ("--speculative-algorithm EAGLE3" in c) == ("eagle3" in name)
        # 135M: the demo's own target and draft; above it dummy target weights and the random draft's own
        assert ("--load-format dummy" in c) == (not name.startswith("135m"))
        assert ("--speculative-draft-load-format auto" in c) == (not name.startswith("135m") and "eagle3" in name)
    assert f"--model-path {embedded} " in cmds["135m_eagle3"]
    assert f"--speculative-draft-model-path {shipped_draft()} " in cmds["135m_eagle3"]
    probe = "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2"
    assert probe in cmds["135m_eagle3_probe"]
    assert "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3" in cmds["7b_eagle3"]
    root = tmp_path / "w" / "breakeven"
    t7 = json.loads((root / "targets" / "7b" / "config.json").read_text())
    assert (t7["hidden_size"], t7["head_dim"], t7["num_hidden_layers"], t7["vocab_size"]) == (4096, 128, 32, 49152)
    assert (root / "targets" / "7b" / "tokenizer.json").exists()
    d7 = json.loads((root / "drafts" / "7b" / "config.json").read_text())
    assert d7["hidden_size"] == 4096 and d7["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 15, 28]
    assert d7["draft_vocab_size"] == 12000  # the shipped draft's vocabulary
    assert doc["sizes"]["135m"]["params"] == 134_515_008 and doc["sizes"]["7b"]["params"] == 6_677_598_208


def test_a_random_draft_has_the_targets_width_the_shipped_vocabulary_and_its_map(tmp_path):
    from kit.checkpoint.safetensors_io import read_header

    target = gb.target_config(SMOLLM2, "360m")
    d = gb.write_draft(tmp_path / "d", target, 12000)
    cfg = json.loads((d / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["draft_vocab_size"]) == (960, 1, 12000)
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["torch_dtype"] == "bfloat16"
    shapes = {t.name: tuple(t.shape) for t in read_header(d / "model.safetensors")[1]}
    assert shapes["lm_head.weight"] == (12000, 960) and shapes["d2t"] == (12000,)
    mtime = (d / "model.safetensors").stat().st_mtime_ns
    gb.write_draft(tmp_path / "d", target, 12000)  # written once
    assert (d / "model.safetensors").stat().st_mtime_ns == mtime


def test_unknown_size_is_one_line_and_no_output(tmp_path):
    with pytest.raises(SystemExit, match="--sizes: unknown"):
        gb.main(["--work", str(tmp_path), "--out", str(tmp_path / "o"), "--sizes", "135m,70b", "--dry-run"])
    assert not (tmp_path / "o").exists()


def _rec(chunks: list[tuple[float, int]], verify: int | None, e2e: float) -> RequestRecord:
    r = RequestRecord(api="sglang", ok=True, e2e=e2e)
    r.chunk_t, r.chunk_tok = [t for t, _ in chunks], [k for _, k in chunks]
    r.ttft, r.completion_tokens = chunks[0][0], sum(k for _, k in chunks)
    if verify:
        r.spec = {"verify_ct": verify}
    return r


def test_a_streamed_request_gives_its_decode_step_or_iteration_cost():
    # baseline: first token at 10 ms, then 127 tokens in chunks of 4 (continuous decode steps) over 254 ms
    base = _rec([(0.010, 1)] + [(0.010 + 0.008 * i, 4) for i in range(1, 32)] + [(0.264, 3)], None, 0.265)
    row = gb.request_costs(base)
    assert row["tokens"] == 128 and row["decode_tokens"] == 127
    assert row["ms_per_token"] == pytest.approx(254 / 127) and row["ttft_ms"] == pytest.approx(10.0)
    assert "ms_per_iteration" not in row
    # EAGLE3: 128 tokens in 59 verify steps over 236 ms after the first token, the chunks not one per step
    spec = _rec([(0.012, 1), (0.248, 127)], 59, 0.25)
    row = gb.request_costs(spec)
    assert row["ms_per_iteration"] == pytest.approx(4.0) and row["accept_length"] == pytest.approx(128 / 59)
    # one chunk per verify step: 60 verify steps counted, 59 of them after the first chunk
    streamed = _rec([(0.012, 2)] + [(0.012 + 0.004 * i, 2) for i in range(1, 60)] + [(0.252, 8)], 60, 0.26)
    row = gb.request_costs(streamed)
    assert row["iterations"] == 60 and row["ms_per_iteration"] == pytest.approx(240 / 60)
    failed = RequestRecord(api="sglang", ok=False, error="ReadTimeout: x")
    assert gb.request_costs(failed) == {"ok": False, "error": "ReadTimeout: x"}
    s = gb.summarize([gb.request_costs(spec), gb.request_costs(failed)])
    assert (s["n"], s["failed"], s["t_iteration_ms"]) == (1, 1, 4.0)


def test_analysis_of_a_measured_document():
    plan = gb.Plan(sizes=("135m", "7b"), probe_sizes=("135m",))
    dirs = {"135m": {"params": 134_515_008, "hidden": 576, "layers": 30},
            "7b": {"params": 6_677_598_208, "hidden": 4096, "layers": 32}}  # fmt: skip
    doc = {
        "inputs": {"accept_length": 2.171, "measured_speedup": 0.93},
        "measured": {
            "135m_baseline": {"t_decode_ms": 1.6, "ttft_ms": 9.0},
            "135m_eagle3": {"t_iteration_ms": 3.8, "ttft_ms": 12.0},
            "135m_eagle3_probe": {"t_iteration_ms": 2.9},
            "7b_baseline": {"t_decode_ms": 7.0},
            "7b_eagle3": {"t_iteration_ms": 9.5},
        },
    }
    an = gb.analysis(doc, plan, dirs)
    assert an["at_demo_target"]["predicted_speedup"] == pytest.approx(2.171 * 1.6 / 3.8, abs=1e-4)
    assert an["iteration_split"]["135m"]["draft_step_ms"] == pytest.approx(0.9)
    assert an["iteration_split"]["135m"]["rest_of_iteration_ms"] == pytest.approx(2.0)
    assert an["break_even"]["where"] == "within" and 134e6 < an["break_even"]["params"] < 6.7e9
    del doc["measured"]["7b_eagle3"], doc["measured"]["135m_eagle3"]
    with pytest.raises(RuntimeError, match="no size has both"):
        gb.analysis(doc, plan, dirs)


class _StubServer:
    """Stands in for `kit.serving.process.ServerProcess`: each server is a stub of SGLang's HTTP API
    (kit/tests/sglang_stub.py) that streams 1 prefill token, then 2 tokens a verify step (0.5 ms a step: every
    cost positive however loaded the machine); `fail` names the servers whose start fails as an out-of-memory
    start does."""

    fail: tuple[str, ...] = ()
    stopped: list[str] = []

    def __init__(self, spec):
        self.spec, self.th = spec, None

    @classmethod
    def from_spec(cls, spec, engine="sglang", grace=10):
        return cls(spec)

    def start(self):
        from kit.tests.sglang_stub import StubConfig, StubThread

        spec = self.spec.speculative_algorithm is not None
        cfg = StubConfig(spec=spec, accept_pattern=[2] if spec else [1], speculative_num_draft_tokens=3, metrics=False,
                         step_delay=0.0005)  # fmt: skip
        self.th = StubThread(cfg).__enter__()
        return self

    @property
    def name(self) -> str:
        return Path(self.spec.log_file).stem

    def wait_ready(self, timeout):
        from kit.serving.process import ServerExited

        if self.name in self.fail:
            raise ServerExited(
                "server exited with code 1 before it was ready: torch.OutOfMemoryError: CUDA out of memory"
            )
        return {}

    @property
    def base_url(self):
        return self.th.url

    def stop(self):
        self.th.__exit__(None, None, None)
        self.stopped.append(self.name)
        return 0


def test_a_run_measures_every_server_it_started_and_records_the_one_that_did_not(tmp_path, embedded, monkeypatch):
    monkeypatch.setattr(gb, "write_draft", _config_only_draft)
    monkeypatch.setattr("kit.serving.process.ServerProcess", _StubServer)
    monkeypatch.setattr(_StubServer, "fail", ("7b_eagle3",))
    monkeypatch.setattr(_StubServer, "stopped", [])
    monkeypatch.setattr("kit.demo_gpu.preflight", lambda: {"sglang": "0.5.17", "gpu": "stub"})
    monkeypatch.setattr(gb, "prompts", lambda n: [f"prompt {i}" for i in range(n)])
    out = tmp_path / "out"
    argv = ["--work", str(tmp_path / "w"), "--out", str(out), "--sizes", "135m,7b", "--timeout-s", "120"]
    assert gb.main(argv) == 1  # an error was recorded
    doc = json.loads((out / "breakeven.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == ["breakeven.json", "records.jsonl"]
    assert [e["where"] for e in doc["errors"]] == ["start 7b_eagle3"]
    assert "CUDA out of memory" in doc["started"]["7b_eagle3"]["error"]
    assert sorted(_StubServer.stopped) == sorted(doc["started"])  # every server stopped, the failed one too
    m = doc["measured"]
    assert set(m) == {"135m_baseline", "135m_eagle3", "135m_eagle3_probe", "7b_baseline"}
    assert m["135m_baseline"]["n"] == 6 and m["135m_baseline"]["t_iteration_ms"] is None
    assert m["135m_eagle3"]["accept_length_observed"] == pytest.approx(128 / 64)  # 1 + 2 x 63 + 1: 64 verify steps
    # only the 135M point has both arms: it pays or not there, and the prediction sits beside the recorded demo's
    an = doc["analysis"]
    assert [r["name"] for r in an["sizes"]] == ["135m"]
    assert an["at_demo_target"]["measured_speedup"] == pytest.approx(0.9317, abs=1e-4)
    assert set(an["iteration_split"]) == {"135m"}
    here = an["at_demo_target"]["this_run"]
    assert here["accept_length"] == pytest.approx(2.0) and here["measured_speedup"] > 0
    assert len((out / "records.jsonl").read_text().splitlines()) == 4 * 6
