"""kit.wiring.probe: hook shapes on a tiny target and on the meta device from a Kimi-K2.5-sized config.json."""

import json
from dataclasses import replace
from pathlib import Path

from kit.reference.speculate import Wiring
from kit.tests.tinymodels import one_thread, tiny_target  # noqa: F401 (autouse fixture)
from kit.wiring.probe import ProbeConfig, fc_gate, hook_shapes, meta_model, probe

DATA = Path(__file__).parent / "data"
KIMI_PATH = Path(__file__).parents[2] / "examples" / "kimi_k25_config.json"


def test_hook_shapes_and_verdict():
    t = tiny_target(layers=6, hidden=32)
    s = hook_shapes(t, [0, 2, 6], tokens=5)
    assert s["points"] == {0: [1, 5, 32], 2: [1, 5, 32], 6: [1, 5, 32]}
    assert s["fused"] == [1, 5, 96] and s["single"] == [1, 5, 32]
    d = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 32}
    assert fc_gate(s, d, Wiring(), None)["fc"] == "runs"
    assert fc_gate(s, d, Wiring(aux_capture=False), None)["fc"] == "bypassed"
    assert fc_gate(s, d, Wiring(), 64)["fc"].startswith("shape error")


def test_config_only_probe_kimi(tmp_path):
    """61 layers x 7168 on the meta device: no weights, no memory."""
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "hidden_size": 7168,
                "num_attention_heads": 64,
                "draft_vocab_size": 32000,
                "vocab_size": 163840,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]},
            }
        )
    )
    doc = probe(
        ProbeConfig(
            target=str(KIMI_PATH),
            draft=str(tmp_path),
            config_only=True,
            sglang_version="0.5.23",
            launch="python -m sglang.launch_server --speculative-algorithm EAGLE",
        )
    )
    assert doc.num_layers == 61 and doc.capture_points == [2, 30, 58]
    assert doc.shapes["fused"][-1] == 21504 and doc.shapes["single"][-1] == 7168
    assert doc.verdict["fed"] == "single Ht" and doc.verdict["fc"] == "bypassed"  # the seed


def test_meta_skeleton_for_unknown_model_type():
    m, how = meta_model(
        {
            "model_type": "no_such_model",
            "hidden_size": 64,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "vocab_size": 100,
        }
    )
    assert "skeleton" in how and len(m.model.layers) == 3


def test_a_probe_is_cached_by_its_inputs(tmp_path, monkeypatch):
    """The same inputs read the stored document back (no forward); a changed draft is probed again."""
    import kit.wiring.probe as kp

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "target" / "config.json"
    target.parent.mkdir()
    target.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                                  "intermediate_size": 128, "num_hidden_layers": 12, "num_attention_heads": 4,
                                  "num_key_value_heads": 2, "vocab_size": 100}))  # fmt: skip
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64}))
    forwards = []
    real = kp.hook_shapes
    monkeypatch.setattr(kp, "hook_shapes", lambda *a, **k: forwards.append(1) or real(*a, **k))
    cfg = ProbeConfig(target=str(target), draft=str(draft), config_only=True, sglang_version="0.5.23")
    first = probe(cfg)
    again = probe(cfg)
    assert len(forwards) == 1 and first.cached_s is None and again.cached_s is not None
    assert replace(again, cached_s=None) == first
    assert "cached_s" not in first.to_dict() and list(again.to_dict())[-1] == "cached_s"
    fused = first.shapes["fused"][-1]
    assert fused == 64 * len(first.capture_points) > 64 and first.verdict["fc"] == "runs"
    # a draft as wide as the fused states: SGLang's gate would skip its fc
    (draft / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": fused}))
    assert probe(cfg).verdict["fc"] == "bypassed" and len(forwards) == 2


def test_a_probe_without_a_draft_reads_the_shipped_one(tmp_path, monkeypatch):
    """No --draft: the kit's shipped demo draft (`kit.models.shipped_draft`), as `kit demo` serves it, never
    one trained on this CPU (the probe does not import the trainer, a side room)."""
    from kit.models import shipped_draft

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "config.json"
    target.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
                                  "intermediate_size": 64, "num_hidden_layers": 30, "num_attention_heads": 9,
                                  "num_key_value_heads": 3, "vocab_size": 49152}))  # fmt: skip
    doc = probe(ProbeConfig(target=str(target), config_only=True, sglang_version="0.5.23"))
    assert doc.draft == str(shipped_draft())
    assert doc.capture_points == [2, 15, 27]  # its aux ids 1, 14, 26: the inputs of the layers after them
    assert doc.verdict["fc"] == "runs"
