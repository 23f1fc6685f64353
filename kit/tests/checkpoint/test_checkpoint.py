"""`kit inspect` and the doctor provider on tiny drafts written in each layout."""

import json
import subprocess
import sys

import pytest

from kit.checkpoint.inspect import doctor_checks, inspect
from kit.checkpoint.random_draft import write_random_draft
from kit.cli import main

TINY = {
    "hidden_size": 16,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 8,
    "intermediate_size": 24,
    "vocab_size": 64,
    "num_hidden_layers": 8,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "max_position_embeddings": 128,
    "architectures": ["LlamaForCausalLM"],
}


def draft(tmp_path, layout="speculators", name="d", **kw):
    return write_random_draft(tmp_path / name, layout, TINY, draft_vocab_size=kw.pop("vd", 32), **kw)


def run_json(capsys, *argv):
    rc = main(list(argv) + ["--json"])
    return rc, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def codes(doc, severity=None):
    return {f["code"] for f in doc["findings"] if severity in (None, f["severity"])}


def test_speculators_draft_flags_arch_and_lists_keys(tmp_path, capsys):
    rc, doc = run_json(capsys, "inspect", str(draft(tmp_path)), "--sglang-version", "0.5.23")
    assert rc == 1 and doc["facts"]["layout"] == "speculators"
    assert "draft.arch" in codes(doc, "error") and "draft.keys_dropped" not in codes(doc)
    names = {t["name"] for t in doc["tensors"]}
    assert "layers.0.self_attn.q_proj.weight" in names and doc["prefixes"]["layers.0"]["tensors"] == 10
    rc, doc = run_json(capsys, "inspect", str(tmp_path / "d"), "--sglang-version", "0.5.8")
    assert {"draft.keys_dropped", "draft.params_missing"} <= codes(doc, "error")


def test_sglang_draft_is_clean_in_both_eras(tmp_path, capsys):
    d = draft(tmp_path, "sglang")
    for v in ("0.5.8", "0.5.23"):
        rc, doc = run_json(capsys, "inspect", str(d), "--sglang-version", v)
        assert rc == 0, doc["findings"]
        assert doc["simulation"]["version"] == v
    assert main(["inspect", str(d)]) == 0
    assert "simulated load" in capsys.readouterr().out


def test_config_tensor_disagreement(tmp_path):
    d = draft(tmp_path, "sglang")
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(num_key_value_heads=2, num_hidden_layers=2)
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 2]
    cfg["num_aux_hidden_states"] = 2
    (d / "config.json").write_text(json.dumps(cfg))
    rep = inspect(d, "0.5.23").report
    titles = " | ".join(f.title for f in rep.by_code("draft.shape"))
    assert "k_proj" in titles and "implies 3 aux states" in titles
    assert rep.by_code("draft.layers")


def test_d2t_problem_reported(tmp_path):
    import torch

    from kit.checkpoint.safetensors_io import read_checkpoint, write_safetensors

    d = draft(tmp_path, "sglang")
    ck = read_checkpoint(d)
    from kit.checkpoint.safetensors_io import load_tensor

    state = {k: load_tensor(t) for k, t in ck.tensors.items()}
    state.pop("d2t")
    write_safetensors(d / "model.safetensors", state)
    rep = inspect(d, "0.5.23").report
    assert any(f.severity == "error" and "as target id" in f.title for f in rep.by_code("draft.d2t"))
    assert torch  # torch used only to write the fixture


@pytest.mark.parametrize("content", [b"\x01\x02", b"\xff" * 8 + b"{}", b"\x05\0\0\0\0\0\0\0{bad}"])
def test_corrupt_exit_2_no_traceback(tmp_path, content):
    f = tmp_path / "x.safetensors"
    f.write_bytes(content)
    r = subprocess.run([sys.executable, "-m", "kit", "inspect", str(f), "--json"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr + r.stdout
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["findings"][0]["code"] == "ckpt.corrupt"


def test_inspect_never_imports_torch(tmp_path):
    d = draft(tmp_path)
    code = (
        "import sys; from kit.cli import main; main(['inspect', sys.argv[1], '--json']); "
        "assert 'torch' not in sys.modules and 'numpy' not in sys.modules, 'heavy import'"
    )
    r = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_doctor_provider(tmp_path):
    from kit.doctor import Deployment, DoctorConfig

    d = draft(tmp_path)
    fs = doctor_checks(Deployment.build(DoctorConfig(draft=str(d), sglang_version="0.5.8")))
    assert {"draft.arch", "draft.keys_dropped"} <= {f.code for f in fs}
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "config.json").write_text((d / "config.json").read_text())
    fs = doctor_checks(Deployment.build(DoctorConfig(draft=str(lone / "config.json"))))
    # a speculators config has no model_type: AutoConfig refuses it before SGLang reads architectures
    assert [f.code for f in fs if f.severity == "error"] == ["draft.config", "draft.arch"]
    assert "will not start" in fs[0].title
    assert doctor_checks(Deployment.build(DoctorConfig())) == []
    (d / "model.safetensors").write_bytes(b"\0" * 3)
    fs = doctor_checks(Deployment.build(DoctorConfig(draft=str(d))))
    assert [f.code for f in fs] == ["ckpt.corrupt"]
