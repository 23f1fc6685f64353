"""kit.rehearsal.runner / kit.rehearsal.hooks on CPU: the launch adjustment, the recorder's patching against stand-in
SGLang classes (written after 0.5.17's llama_eagle3.py, minimax_m3.py and qwen2_moe.py), the import hook in a
real child interpreter, and the record -> findings mapping against doctor's verdict.

    python -m pytest kit/tests/serving/test_rehearsal.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from kit.findings import Finding, KitInputError
from kit.rehearsal import hooks
from kit.rehearsal.runner import adjust_launch, compare, observed_facts, observed_findings, read_record
from kit.serving import after_import
from kit.serving.after_import import COPY_NAME, install_as_sitecustomize

DATA = Path(__file__).parents[1] / "data"


@pytest.fixture
def rec(tmp_path, monkeypatch):
    path = tmp_path / "record.jsonl"
    monkeypatch.setenv(hooks.RECORD_ENV, str(path))
    return path


# -- the launch --------------------------------------------------------------------------------------------
def _seed():
    from kit.sglang.cmdline import split_command

    return split_command((DATA / "seed_launch.sh").read_text())


def _adjust(tp, version="0.5.17"):
    env, argv = _seed()
    return adjust_launch(env, argv, version, "/m/target", "/m/draft", tp, 31000, 0.3, "/m/site", "/m/rec.jsonl")


def test_the_users_flags_and_environment_stay_and_every_change_has_a_reason():
    env, argv = _seed()
    new_env, new_argv, changes, _ = _adjust(tp=1)
    from kit.sglang.flags import resolve_flags as resolve

    r = resolve(new_argv[3:], "0.5.17")
    assert not r.errors and not r.unknown
    v = r.values
    assert v["model_path"] == "/m/target" and v["speculative_draft_model_path"] == "/m/draft"
    assert v["load_format"] == "dummy" and v["skip_tokenizer_init"] and v["speculative_draft_load_format"] == "auto"
    assert v["tp_size"] == 1 and v["mem_fraction_static"] == 0.3 and v["port"] == 31000
    # the user's own choices are kept: algorithm EAGLE (the seed's fault), steps/topk/tokens, decode steps
    assert v["speculative_algorithm"] == "EAGLE" and v["speculative_eagle_topk"] == 4
    assert v["num_continuous_decode_steps"] == 4 and v["disable_custom_all_reduce"]
    assert all(new_env[k] == env[k] for k in env if k.startswith(("NCCL_", "SGLANG_")))
    assert new_env["KIT_REHEARSAL_RECORD"] == "/m/rec.jsonl" and new_env["PYTHONPATH"].startswith("/m/site")
    by = {c.flag: c for c in changes}
    assert by["--tp-size"].original == "8" and "TP1" in by["--tp-size"].reason and all(c.reason for c in changes)


def test_tp_is_kept_when_the_host_has_the_gpus():
    _, argv, changes, _ = _adjust(tp=8)
    assert "--tp-size" not in {c.flag for c in changes}
    assert argv[argv.index("--tp-size") + 1] == "8"


def test_a_release_without_the_draft_load_format_flag_is_noted():
    env, argv = _seed()
    from kit.sglang.flags import known_versions, table_for

    old = next((v for v in known_versions() if "speculative_draft_load_format" not in table_for(v).by_dest()), None)
    if old is None:
        pytest.skip("no stored flag table of a release without --speculative-draft-load-format")
    _, new_argv, _, notes = adjust_launch(env, argv, old, "/t", "/d", 1, 31000, 0.3, "/s", "/r")
    assert "--speculative-draft-load-format" not in new_argv and any("not built by the kit yet" in n for n in notes)


# -- the recorder on stand-in SGLang classes ---------------------------------------------------------------
def _draft_module():
    """A stand-in `sglang.srt.models.llama_eagle3`: 0.5.17's load_weights loop over a tiny parameter set."""
    import torch

    mod = types.ModuleType("sglang.srt.models.llama_eagle3")

    def default_weight_loader(param, loaded_weight):
        param.data.copy_(loaded_weight)

    mod.default_weight_loader = default_weight_loader

    class LlamaModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(12, 4, bias=False)
            self.norm = torch.nn.Parameter(torch.ones(4))
            self.hidden_norm = torch.nn.Parameter(torch.ones(4))

        def forward(self, input_ids, positions, forward_batch):
            hs = forward_batch.spec_info.hidden_states
            return self.fc(hs) if hs.shape[-1] != 4 else hs

    class LlamaForCausalLMEagle3(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = LlamaModel()
            self.lm_head = torch.nn.Parameter(torch.zeros(8, 4))
            self.config = types.SimpleNamespace(hidden_size=4)

        def load_weights(self, weights):  # the shape of 0.5.17's loop: legacy map, d2t/t2d, model. fallback
            params_dict = dict(self.named_parameters())
            for name, loaded_weight in weights:
                name = name.replace("midlayer", "layers.0")
                if "d2t" in name:
                    self.hot_token_id = loaded_weight
                    continue
                if "t2d" in name:
                    continue
                param_name = name if name in params_dict else f"model.{name}"
                if param_name in params_dict:
                    param = params_dict[param_name]
                    getattr(param, "weight_loader", mod.default_weight_loader)(param, loaded_weight)

    LlamaModel.__module__ = LlamaForCausalLMEagle3.__module__ = mod.__name__
    mod.LlamaModel, mod.LlamaForCausalLMEagle3 = LlamaModel, LlamaForCausalLMEagle3
    return mod


def test_load_weights_records_skipped_names_and_unfilled_parameters(rec):
    import torch

    mod = _draft_module()
    hooks.patch_module(mod)
    m = mod.LlamaForCausalLMEagle3()
    weights = [
        ("fc.weight", torch.ones(4, 12)),
        ("norm", torch.ones(4)),
        ("midlayer.self_attn.q_proj.weight", torch.ones(4, 8)),  # no such parameter: skipped silently
        ("d2t", torch.zeros(8, dtype=torch.long)),
        ("t2d", torch.ones(8, dtype=torch.bool)),
    ]
    m.load_weights(iter(weights))
    [obs] = read_record(rec)["load_weights"]
    assert obs["draft_class"] == "LlamaForCausalLMEagle3"
    assert obs["skipped"] == ["midlayer.self_attn.q_proj.weight"]
    assert sorted(obs["unfilled"]) == ["lm_head", "model.hidden_norm"]
    assert torch.equal(m.model.fc.weight, torch.ones(4, 12))  # observed, not changed
    assert mod.default_weight_loader.__name__ == "default_weight_loader"  # restored


def test_draft_input_width_says_whether_fc_runs(rec):
    import torch

    mod = _draft_module()
    hooks.patch_module(mod)
    m = mod.LlamaForCausalLMEagle3()
    fb = types.SimpleNamespace(spec_info=types.SimpleNamespace(hidden_states=torch.zeros(2, 12)))
    m.model(None, None, fb)
    fb.spec_info.hidden_states = torch.zeros(2, 4)
    m.model(None, None, fb)
    obs = read_record(rec)["draft_input"]
    assert [(o["width"], o["fc_in"], o["draft_hidden"]) for o in obs] == [(12, 12, None), (4, 12, None)]


class _Mode:
    def __init__(self, name):
        self.name = name

    def is_decode(self):
        return self.name == "DECODE"


def test_decode_steps_do_not_use_up_the_draft_extend_records(rec):
    """SGLang captures the draft's decode CUDA graphs (H-wide recurrent state) before any draft extend runs."""
    import torch

    mod = _draft_module()
    hooks.patch_module(mod)
    m = mod.LlamaForCausalLMEagle3()
    hooks._seen.clear()
    decode = types.SimpleNamespace(forward_mode=_Mode("DECODE"), spec_info=types.SimpleNamespace(hidden_states=None))
    for _ in range(hooks.MAX_DRAFT_INPUTS + 3):
        decode.spec_info.hidden_states = torch.zeros(2, 4)
        m.model(None, None, decode)
    extend = types.SimpleNamespace(
        forward_mode=_Mode("DRAFT_EXTEND"), spec_info=types.SimpleNamespace(hidden_states=torch.zeros(2, 12))
    )
    m.model(None, None, extend)
    obs = read_record(rec)["draft_input"]
    assert [(o["mode"], o["decode"], o["width"]) for o in obs] == [("DECODE", True, 4)] * hooks.MAX_DRAFT_INPUTS + [
        ("DRAFT_EXTEND", False, 12)
    ]
    assert not any(o["capturing"] for o in obs)  # no CUDA here


def test_the_fc_verdict_reads_the_target_states_not_the_drafts_own_decode_state():
    decode = [{"mode": "DECODE", "decode": True, "width": 256, "draft_hidden": 256, "fc_in": 768}] * 4
    fed = {
        "started": True,
        "record": {"draft_input": decode + [{**decode[0], "mode": "DRAFT_EXTEND", "decode": False, "width": 768}]},
    }
    assert observed_findings(fed) == []
    assert observed_facts(fed)["draft_input_width"] == [768]
    bypassed = {
        "started": True,
        "record": {"draft_input": decode + [{**decode[0], "mode": "DRAFT_EXTEND", "decode": False}]},
    }
    assert [f.code for f in observed_findings(bypassed)] == ["aux.algorithm"]
    only_decode = {"started": True, "record": {"draft_input": decode}}
    assert observed_findings(only_decode) == [] and observed_facts(only_decode)["draft_input_width"] == []


def _target_module(marks_only: bool):
    """A target class whose setter writes self.model.layers_to_capture (minimax_m3.py, llama.py); its model
    either reads that list or only `_is_layer_to_capture` marks (qwen2_moe.py's forward)."""
    mod = types.ModuleType("sglang.srt.models.stand_in_target")

    class Layer:
        pass

    class Model:
        def __init__(self):
            self.layers = [Layer() for _ in range(8)]
            self.layers_to_capture = []

        def forward(self, h):
            aux = [
                h + i
                for i in range(8)
                if (
                    getattr(self.layers[i], "_is_layer_to_capture", False)
                    if marks_only
                    else i in self.layers_to_capture
                )
            ]
            return (h, aux) if aux else h

    class Target:
        def __init__(self):
            self.model = Model()
            self.capture_aux_hidden_states = False

        def set_eagle3_layers_to_capture(self, layer_ids=None):
            self.capture_aux_hidden_states = True
            self.model.layers_to_capture = [2, 4, 5] if layer_ids is None else [v + 1 for v in layer_ids]

        def forward(self, h):
            out = self.model.forward(h)
            if self.capture_aux_hidden_states:
                out, aux = out
            return out

    Target.__module__ = mod.__name__
    mod.Target = Target
    return mod


@pytest.mark.parametrize("marks_only", [False, True])
def test_capture_records_the_layers_and_the_marks_the_forward_reads(rec, marks_only):
    mod = _target_module(marks_only)
    hooks.patch_module(mod)
    t = mod.Target()
    t.set_eagle3_layers_to_capture([1, 3, 4])
    [obs] = read_record(rec)["capture"]
    assert obs["target_class"] == "Target" and obs["layer_ids"] == [1, 3, 4]
    assert obs["layers_to_capture"] == [2, 4, 5] and obs["marked"] == []
    if marks_only:  # the bare-forward crash doctor now names (aux.target_capture)
        with pytest.raises(ValueError, match="unpack"):
            t.forward(1.0 * __import__("torch").zeros(5))
    else:
        assert t.forward(1.0) == 1.0


def test_a_failing_observer_records_and_never_breaks_the_call(rec, monkeypatch):
    mod = _target_module(False)
    hooks.patch_module(mod)
    t = mod.Target()

    def broken(model):
        raise KeyError("a release without what the observer expects")

    monkeypatch.setattr(hooks, "_layers_state", broken)
    t.set_eagle3_layers_to_capture(None)
    assert t.capture_aux_hidden_states is True and t.model.layers_to_capture == [2, 4, 5]
    [err] = read_record(rec)["hook_error"]
    assert err["hook"] == "capture" and "KeyError" in err["error"]


def test_sitecustomize_patches_modules_as_they_import_in_a_child_interpreter(tmp_path):
    """The file copied as sitecustomize.py, a fake `sglang.srt.server_args` on the path: the child's ServerArgs
    is recorded after __post_init__, and the module itself is untouched on disk."""
    site, fake = tmp_path / "site", tmp_path / "fake"
    install_as_sitecustomize(Path(hooks.__file__), site)
    pkg = fake / "sglang" / "srt"
    pkg.mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    src = (
        "from dataclasses import dataclass\n@dataclass\nclass ServerArgs:\n    speculative_algorithm: str = 'EAGLE3'\n"
        "    speculative_num_steps: int = None\n    def __post_init__(self):\n        self.speculative_num_steps = 3\n"
    )
    (pkg / "server_args.py").write_text(src)
    rec = tmp_path / "rec.jsonl"
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{fake}", hooks.RECORD_ENV: str(rec)}
    code = "from sglang.srt.server_args import ServerArgs; ServerArgs()"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = read_record(rec)
    assert got["server_args"][0]["speculative_algorithm"] == "EAGLE3"
    assert got["server_args"][0]["speculative_num_steps"] == 3  # after __post_init__ resolved it
    assert (pkg / "server_args.py").read_text() == src


# -- record -> findings -------------------------------------------------------------------------------------
def _f(code, severity="error"):
    return Finding(code=code, severity=severity, title=code)


def test_a_startup_unpack_crash_confirms_the_bare_forward_finding():
    result = {
        "started": False,
        "record": {
            "exception": [
                {"traceback": "File minimax_m3.py, in forward\nValueError: too many values to unpack (expected 2)"}
            ]
        },
    }
    obs = observed_findings(result)
    assert [f.code for f in obs] == ["aux.target_capture"] and "unpack" in obs[0].title
    rows = {r["code"]: r["verdict"] for r in compare([_f("aux.target_capture"), _f("draft.arch")], obs, started=False)}
    assert rows == {"aux.target_capture": "confirmed", "draft.arch": "not reached"}


def test_what_only_the_loader_shows_is_new_and_what_did_not_happen_is_refuted():
    result = {
        "started": True,
        "record": {
            "load_weights": [
                {
                    "draft_class": "LlamaForCausalLMEagle3",
                    "skipped": ["midlayer.mlp.gate_proj.weight"],
                    "unfilled": ["model.layers.0.mlp.gate_up_proj.weight", "lm_head.weight"],
                }
            ],
            "model_config": [{"is_draft_model": True, "quantization": None}],
            "draft_input": [{"width": 768, "draft_hidden": 256, "fc_in": 768}],
        },
    }
    obs = observed_findings(result)
    assert {f.code for f in obs} == {"draft.keys_dropped", "draft.params_missing"}  # lm_head is filled at runtime
    static = [_f("draft.quant"), _f("env.nccl_var", "warning"), _f("aux.layer_ids_ignored")]
    rows = {r["code"]: r["verdict"] for r in compare(static, obs)}
    assert rows == {
        "draft.keys_dropped": "new",
        "draft.params_missing": "new",
        "draft.quant": "refuted",
        "env.nccl_var": "not rehearsed",
        "aux.layer_ids_ignored": "not rehearsed",
    }


def test_fc_bypassed_is_the_algorithm_fault_and_a_quantized_draft_is_draft_quant():
    result = {
        "started": True,
        "record": {
            "draft_input": [{"width": 256, "draft_hidden": 256, "fc_in": 768}],
            "model_config": [{"is_draft_model": True, "quantization": "modelopt"}],
        },
    }
    codes = {f.code for f in observed_findings(result)}
    assert codes == {"aux.algorithm", "draft.quant"}
    # the parse said modelopt, but the loader built the draft class without a quant config: not a quantized draft
    result["record"]["load_weights"] = [{"draft_class": "LlamaForCausalLMEagle3", "quant_config": None}]
    assert "draft.quant" not in {f.code for f in observed_findings(result)}
    result["record"]["load_weights"][0]["quant_config"] = "ModelOptFp8Config"
    assert "draft.quant" in {f.code for f in observed_findings(result)}


def test_an_unknown_startup_failure_is_named_rehearse_startup():
    obs = observed_findings({"started": False, "exit": "server exited with code 1\nRuntimeError: CUDA out of memory"})
    assert [f.code for f in obs] == ["rehearse.startup"] and "CUDA out of memory" in obs[0].title


def test_read_record_tolerates_a_torn_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps({"kind": "process", "pid": 1}) + "\n{torn\n")
    got = read_record(p)
    assert got["bad_lines"] == 1 and got["process"][0]["pid"] == 1


# -- the verb, dry run (CPU) --------------------------------------------------------------------------------
def test_rehearse_dry_run_writes_the_miniatures_and_the_plan(tmp_path, monkeypatch):
    from kit.checkpoint.random_draft import SMOLLM2, write_random_draft
    from kit.checkpoint.safetensors_io import read_checkpoint
    from kit.rehearsal.runner import RehearsalConfig
    from kit.rehearse import rehearse

    monkeypatch.setenv("KIT_NO_VENV_BUILD", "1")
    monkeypatch.setenv("KIT_SGLANG_PYTHON", sys.executable)
    target = tmp_path / "target"
    target.mkdir()
    tcfg = {**SMOLLM2, "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 30}
    (target / "config.json").write_text(json.dumps(tcfg))
    draft = write_random_draft(tmp_path / "draft", layout="sglang", target_config=tcfg, draft_vocab_size=1024)
    launch = tmp_path / "launch.sh"
    launch.write_text(
        "NCCL_ALGO=Ring python3 -m sglang.launch_server --model-path /m/t --tp 2 --speculative-algo EAGLE3 "
        "--speculative-draft-model-path /m/d --mem-fraction-static 0.85\n"
    )
    out = tmp_path / "out"
    cfg = RehearsalConfig(
        target=str(target),
        draft=str(draft),
        launch_file=str(launch),
        out=str(out),
        dry_run=True,
        gpus=1,
        sglang_version="0.5.17",
    )
    report = rehearse(cfg)
    assert {p.name for p in out.iterdir()} >= {"target", "draft", "site", "plan.json", "report.json"}
    assert (out / "site" / "sitecustomize.py").read_text() == Path(hooks.__file__).read_text()
    assert (out / "site" / COPY_NAME).read_text() == Path(after_import.__file__).read_text()
    mini = json.loads((out / "target" / "config.json").read_text())
    assert mini["num_hidden_layers"] == 30 and mini["architectures"] == ["LlamaForCausalLM"]
    assert list(read_checkpoint(out / "draft").tensors) == list(read_checkpoint(draft).tensors)
    plan = report["plan"]
    assert plan["tp"] == 1 and plan["user_tp"] == 2 and plan["env"]["NCCL_ALGO"] == "Ring"
    assert "TP1" in report["rendered_plan"] and "table" not in report  # nothing was run


def test_the_bundles_flags_go_over_the_users_with_a_reason():
    from kit.sglang.bundle import RELEASES

    env, argv = _seed()
    argv = argv + ["--attention-backend", "fa3"]
    flags = tuple(RELEASES["0.5.17"].launch_flags)
    _, new_argv, changes, _ = adjust_launch(env, argv, "0.5.17", "/t", "/d", 1, 31000, 0.3, "/s", "/r", flags)
    from kit.sglang.flags import resolve_flags as resolve

    v = resolve(new_argv[3:], "0.5.17").values
    assert v["attention_backend"] == "triton" and v["sampling_backend"] == "pytorch" and v["skip_server_warmup"]
    assert any(c.flag == "--attention-backend" and c.original == "fa3" for c in changes)
    # every flag the bundle adds is a change with its reason too (docs/sglang-bundle.md), not only the replaced ones
    added = {c.flag: c.new for c in changes if c.original is None and c.reason == "the kit's SGLang bundle needs it"}
    assert added == {"--sampling-backend": "pytorch", "--grammar-backend": "none", "--skip-server-warmup": True}
    # the bundle's --dtype replaces only a float32 it cannot run: auto (and float16) stay, so a dtype fault rehearses
    assert "dtype" not in v or v["dtype"] == "auto"
    for given, want in ((["--dtype", "float16"], "float16"), (["--dtype", "float32"], "bfloat16")):
        _, new_argv, _, _ = adjust_launch(env, argv + given, "0.5.17", "/t", "/d", 1, 31000, 0.3, "/s", "/r", flags)
        assert resolve(new_argv[3:], "0.5.17").values["dtype"] == want


def test_fused_pairs_count_as_loaded(rec):
    """0.5.17 kimi_k25_eagle3.py fuses q_a_proj and kv_a_proj_with_mqa with torch.cat before loading: neither
    checkpoint name is skipped."""
    import torch

    mod = types.ModuleType("sglang.srt.models.kimi_k25_eagle3")
    mod.default_weight_loader = lambda param, w: param.data.copy_(w)

    class Eagle3DeepseekV2ForCausalLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fused_qkv_a_proj_with_mqa = torch.nn.Parameter(torch.zeros(6, 4))

        def load_weights(self, weights):
            cache = {}
            for name, w in weights:
                cache[name] = w
                if len(cache) == 2:
                    fused = torch.cat(
                        [
                            cache["layers.0.self_attn.q_a_proj.weight"],
                            cache["layers.0.self_attn.kv_a_proj_with_mqa.weight"],
                        ]
                    )
                    mod.default_weight_loader(self.fused_qkv_a_proj_with_mqa, fused)

    Eagle3DeepseekV2ForCausalLM.__module__ = mod.__name__
    mod.Eagle3DeepseekV2ForCausalLM = Eagle3DeepseekV2ForCausalLM
    hooks.patch_module(mod)
    m = mod.Eagle3DeepseekV2ForCausalLM()
    m.load_weights(
        iter(
            [
                ("layers.0.self_attn.q_a_proj.weight", torch.ones(2, 4)),
                ("layers.0.self_attn.kv_a_proj_with_mqa.weight", torch.ones(4, 4)),
            ]
        )
    )
    [obs] = read_record(rec)["load_weights"]
    assert obs["skipped"] == [] and obs["unfilled"] == [] and torch.equal(m.fused_qkv_a_proj_with_mqa, torch.ones(6, 4))
    assert torch.cat is not None and torch.cat.__name__ == "cat"


def test_the_release_is_read_from_a_bundle_without_package_metadata(tmp_path, monkeypatch):
    from kit.sglang.versions import importable_version

    pkg = tmp_path / "sglang"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_version.py").write_text("__version__ = version = '0.5.17'\n__version_tuple__ = (0, 5, 17)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("kit.sglang.versions.installed_version", lambda: None)
    assert importable_version() == "0.5.17"


def test_the_not_rehearsable_rule_reads_the_importable_sglang_offline(tmp_path, monkeypatch):
    """A GPU host with a fresh cache and no network: the rules come from the SGLang the rehearsal will launch."""
    from kit.hf import HFConfig
    from kit.rehearsal.runner import not_rehearsable
    from kit.sglang import loader
    from kit.sglang.cmdline import find_launch

    site = tmp_path / "site"
    (site / "sglang" / "srt" / "configs").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "_version.py").write_text("__version__ = version = '9.9.1'\n")
    (site / "sglang" / "srt" / "configs" / "model_config.py").write_text(
        'multimodal_model_archs = ["KimiK25ForConditionalGeneration", "Qwen2VLForConditionalGeneration", '
        '"Gemma3ForConditionalGeneration"]\nmm_disabled_models = ["Gemma3ForConditionalGeneration"]\n'
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr("kit.sglang.versions.installed_version", lambda: None)
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "empty-cache"))
    loader.processor_archs.cache_clear()
    assert loader.processor_archs("9.9.1") == {"KimiK25ForConditionalGeneration", "Qwen2VLForConditionalGeneration"}
    assert loader.processor_archs("9.9.2") is None  # another release: only its (empty) cache, no download
    found = find_launch(
        "python -m sglang.launch_server --model-path /m --speculative-algorithm EAGLE3", version="9.9.1"
    )
    why = not_rehearsable(HFConfig.of({"architectures": ["Qwen2VLForConditionalGeneration"]}), found, "9.9.1")
    assert why and "processor" in why and "Qwen2VL" in why
    # Kimi-K2.5's processor the kit stands in for; a text-only class loads none
    for arch in ("KimiK25ForConditionalGeneration", "Gemma3ForConditionalGeneration"):
        assert not_rehearsable(HFConfig.of({"architectures": [arch]}), found, "9.9.1") is None
    loader.processor_archs.cache_clear()


# -- the run, end to end on CPU: the kit's lifecycle around a stand-in server --------------------------------
FAKE_SERVER = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
if "--slow" in sys.argv:
    import time
    print("Capture cuda graph begin. This can take up to several minutes.", flush=True)
    time.sleep(60)
if "--crash" in sys.argv:
    print("Traceback (most recent call last):", flush=True)
    print("ValueError: too many values to unpack (expected 2)", flush=True)
    sys.exit(1)
import sitecustomize  # the recorder is on PYTHONPATH: it already ran; record what a draft load would
sitecustomize.record("load_weights", draft_class="LlamaForCausalLMEagle3", skipped=["midlayer.x"], unfilled=[])
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def _send(self, doc):
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self._send({})
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self._send({"output_ids": [5, 6, 7], "meta_info": {"spec_verify_ct": 2}})
HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _fake_plan(tmp_path, crash: bool, slow: bool = False, timeout: float = 30):
    from kit.rehearsal.runner import RehearsalConfig, RehearsalPlan
    from kit.serving.process import free_port

    site = tmp_path / "site"
    install_as_sitecustomize(Path(hooks.__file__), site)
    server = tmp_path / "fake_server.py"
    server.write_text(FAKE_SERVER)
    port = free_port()
    rec = tmp_path / "record.jsonl"
    argv = [sys.executable, str(server), "--port", str(port)] + (["--crash"] if crash else []) + ["--slow"] * slow
    env = {"PYTHONPATH": str(site), hooks.RECORD_ENV: str(rec)}
    cfg = RehearsalConfig(target="t", draft="d", launch_file="l", out=str(tmp_path), requests=2, timeout=timeout)
    return RehearsalPlan(cfg, "0.5.17", env, argv, [], [], "t", "d", str(rec), port, 1, 1)


def test_run_starts_asks_by_input_ids_stops_and_maps_what_it_recorded(tmp_path):
    from kit.rehearsal.runner import run_rehearsal

    result = run_rehearsal(_fake_plan(tmp_path, crash=False))
    assert result["started"] and [r["status"] for r in result["requests"]] == [200, 200]
    assert observed_facts(result)["spec_verify_ct"] == [2, 2]
    assert {f.code for f in observed_findings(result)} == {"draft.keys_dropped"}
    assert result["record"]["process"] and result["exit_code"] is not None  # stopped


def test_run_of_a_server_that_crashes_names_the_fault_from_its_log(tmp_path):
    from kit.rehearsal.runner import run_rehearsal

    result = run_rehearsal(_fake_plan(tmp_path, crash=True))
    assert not result["started"] and "too many values to unpack" in result["exit"]
    assert [f.code for f in observed_findings(result)] == ["aux.target_capture"]


def test_a_server_still_starting_at_the_limit_is_a_timeout_not_a_verdict(tmp_path):
    from kit.findings import Finding
    from kit.rehearsal.runner import TIMEOUT, run_rehearsal

    result = run_rehearsal(_fake_plan(tmp_path, crash=False, slow=True, timeout=3))
    assert not result["started"] and result["timed_out"]["after_s"] == 3
    assert "Capture cuda graph" in result["timed_out"]["last_log_line"]
    [f] = observed_findings(result)
    assert f.code == TIMEOUT and "not ready within 3 s" in f.title and "Capture cuda graph" in f.title
    table = compare([Finding(code="draft.context_short", severity="error", title="t")], [f], started=False)
    assert {r["code"]: r["verdict"] for r in table} == {"draft.context_short": "not reached", TIMEOUT: "timed out"}
    assert result["clean"]


def test_cuda_graphs_are_captured_up_to_the_rehearsals_batch_only():
    from kit.rehearsal.runner import GRAPH_BS
    from kit.sglang.flags import resolve_flags

    _, argv, changes, _ = _adjust(tp=1)
    v = resolve_flags(argv[3:], "0.5.17").values
    assert v["cuda_graph_max_bs_decode"] == GRAPH_BS and v["cuda_graph_max_bs_prefill"] == 128
    assert any(c.flag == "--cuda-graph-max-bs-decode" and "capture" in c.reason for c in changes)
    env, seed = _seed()
    for extra, kept in ((["--cuda-graph-max-bs", "4"], 4), (["--disable-cuda-graph"], None)):
        _, argv, changes, _ = adjust_launch(env, seed + extra, "0.5.17", "/t", "/d", 1, 31000, 0.3, "/s", "/r")
        assert resolve_flags(argv[3:], "0.5.17").values.get("cuda_graph_max_bs_decode") == kept
    _, argv, _, _ = _adjust(tp=1, version="0.5.4")  # an older release names it --cuda-graph-max-bs
    assert resolve_flags(argv[3:], "0.5.4").values["cuda_graph_max_bs"] == GRAPH_BS


def test_flags_the_table_cannot_read_stay_for_sglang_to_judge():
    env, argv = _seed()
    argv = argv + ["--speculative-draft", "/x", "--no-such-flag"]
    _, new_argv, _, notes = adjust_launch(env, argv, "0.5.17", "/t", "/d", 1, 31000, 0.3, "/s", "/r")
    assert new_argv[-3:] == ["--speculative-draft", "/x", "--no-such-flag"] and any(
        "kept as written" in n for n in notes
    )


def test_rehearsals_side_by_side_get_their_own_ports_gpus_and_a_capped_kv_pool():
    env, argv = _seed()
    argv = argv + ["--dist-init-addr", "10.0.0.1:5000"]
    new_env, new_argv, changes, _ = adjust_launch(
        env, argv, "0.5.17", "/t", "/d", 2, 31000, 0.05, "/s", "/r", (),
        max_total_tokens=8192, nccl_port=31001, cuda_visible_devices="0,1",
    )  # fmt: skip
    from kit.sglang.flags import resolve_flags as resolve

    v = resolve(new_argv[3:], "0.5.17").values
    assert str(v["max_total_tokens"]) == "8192" and str(v["nccl_port"]) == "31001" and v["mem_fraction_static"] == 0.05
    assert v["dist_init_addr"] == "127.0.0.1:31002" and v["tp_size"] == 2
    assert new_env["CUDA_VISIBLE_DEVICES"] == "0,1"
    by = {c.flag: c for c in changes}
    assert {"--max-total-tokens", "--nccl-port", "--dist-init-addr", "CUDA_VISIBLE_DEVICES"} <= set(by)
    assert "TP2" in by["--tp-size"].reason and "NCCL" in by["--tp-size"].reason and all(c.reason for c in changes)


def test_tp_is_the_launchs_capped_at_the_gpus_given(tmp_path):
    from kit.checkpoint.random_draft import SMOLLM2, write_random_draft
    from kit.rehearsal.runner import RehearsalConfig, plan_rehearsal

    target = tmp_path / "target"
    target.mkdir()
    tcfg = {**SMOLLM2, "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 30}
    (target / "config.json").write_text(json.dumps(tcfg))
    draft = write_random_draft(tmp_path / "draft", layout="sglang", target_config=tcfg, draft_vocab_size=1024)
    (tmp_path / "l.sh").write_text(
        "python3 -m sglang.launch_server --model-path /m/t --tp 8 --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path /m/d\n"
    )
    kw = dict(target=str(target), draft=str(draft), launch_file=str(tmp_path / "l.sh"), sglang_version="0.5.17")
    plan = plan_rehearsal(RehearsalConfig(**kw, out=str(tmp_path / "a"), tp=2, cuda_visible_devices="0,1"))
    assert (plan.tp, plan.user_tp, plan.env["CUDA_VISIBLE_DEVICES"]) == (2, 8, "0,1")
    assert "TP2" in plan.render() and "(the launch asks TP8)" in plan.render()
    one = plan_rehearsal(RehearsalConfig(**kw, out=str(tmp_path / "b"), cuda_visible_devices="1"))
    assert one.tp == 1 and one.env["CUDA_VISIBLE_DEVICES"] == "1"


def _case_dir(tmp_path, launch: str) -> dict:
    """A llama target config, a random draft and `launch` as a launch file under tmp_path: RehearsalConfig's kwargs."""
    from kit.checkpoint.random_draft import SMOLLM2, write_random_draft

    target = tmp_path / "target"
    target.mkdir()
    tcfg = {**SMOLLM2, "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 30}
    (target / "config.json").write_text(json.dumps(tcfg))
    draft = write_random_draft(tmp_path / "draft", layout="sglang", target_config=tcfg, draft_vocab_size=1024)
    (tmp_path / "l.sh").write_text(launch)
    return dict(target=str(target), draft=str(draft), launch_file=str(tmp_path / "l.sh"), sglang_version="0.5.17")


def test_the_server_gets_only_the_variables_the_users_launch_gives_it(tmp_path):
    from kit.rehearsal.runner import RehearsalConfig, plan_rehearsal

    kw = _case_dir(
        tmp_path,
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 && export SGLANG_ENABLE_SPEC_V2=1 && NCCL_ALGO=Ring "
        "python3 -m sglang.launch_server --model-path /m/t --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path /m/d\n",
    )
    plan = plan_rehearsal(RehearsalConfig(**kw, out=str(tmp_path / "a"), cuda_visible_devices="0"))
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" not in plan.env  # a shell variable: SGLang never sees it
    assert plan.env["SGLANG_ENABLE_SPEC_V2"] == "1" and plan.env["NCCL_ALGO"] == "Ring"
    assert any("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in n for n in plan.notes)


def test_the_own_end_check_finds_the_servers_processes_by_their_record_and_sees_them_gone(tmp_path):
    from dataclasses import replace

    from kit.rehearsal.runner import run_rehearsal

    plan = _fake_plan(tmp_path, crash=False)
    plan.config = replace(plan.config, end_check="own")
    result = run_rehearsal(plan)
    assert result["own_while_up"]["pids"], "the server's process was not found by its record"
    facts = observed_facts(result)
    assert facts["end_check"] == "own" and facts["own_processes_left"] == [] and facts["clean"]


def test_the_notebooks_rehearsal_plans_without_a_gpu_and_can_be_off(tmp_path, monkeypatch):
    from kit.checkpoint.random_draft import SMOLLM2, write_random_draft
    from kit.findings import KitInputError
    from kit.rehearse import rehearse_launch

    monkeypatch.setattr("kit.serving.engines.resolve_engine", lambda name: "reference")
    target = tmp_path / "target"
    target.mkdir()
    tcfg = {**SMOLLM2, "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 30}
    (target / "config.json").write_text(json.dumps(tcfg))
    draft = write_random_draft(tmp_path / "draft", layout="sglang", target_config=tcfg, draft_vocab_size=1024)
    launch = (DATA / "seed_launch.sh").read_text()
    report = rehearse_launch(str(target), str(draft), launch, str(tmp_path / "run"), "auto")
    assert report["plan"]["config"]["dry_run"] and "table" not in report
    assert "aux.algorithm" in {d["code"] for d in report["doctor"]}  # the seed's EAGLE, judged statically
    assert rehearse_launch(str(target), str(draft), launch, str(tmp_path / "off"), "off") is None
    with pytest.raises(KitInputError):
        rehearse_launch(str(target), str(draft), launch, str(tmp_path / "x"), "yes")


def test_a_bundle_installed_sglang_gets_the_bundles_flags_without_being_asked(tmp_path, monkeypatch):
    from kit.rehearse import rehearse_launch
    from kit.sglang.bundle import RELEASES
    from kit.sglang.flags import resolve_flags

    monkeypatch.setattr("kit.serving.engines.resolve_engine", lambda name: "reference")
    kw = _case_dir(tmp_path, (DATA / "seed_launch.sh").read_text())
    monkeypatch.setattr("kit.sglang.bundle_site.installed_bundle_flags", lambda: list(RELEASES["0.5.17"].launch_flags))
    plan = rehearse_launch(kw["target"], kw["draft"], (DATA / "seed_launch.sh").read_text(), str(tmp_path / "r"))[
        "plan"
    ]
    v = resolve_flags(plan["argv"][3:], "0.5.17").values
    assert v["attention_backend"] == "triton" and v["sampling_backend"] == "pytorch"
    monkeypatch.setattr("kit.sglang.bundle_site.installed_bundle_flags", lambda: [])  # any other install: none added
    plan = rehearse_launch(kw["target"], kw["draft"], (DATA / "seed_launch.sh").read_text(), str(tmp_path / "s"))[
        "plan"
    ]
    assert resolve_flags(plan["argv"][3:], "0.5.17").values.get("sampling_backend") != "pytorch"


def test_what_sglang_cannot_start_as_written_is_not_rehearsable(tmp_path):
    from kit.findings import KitInputError
    from kit.rehearsal.runner import RehearsalConfig, not_rehearsable, plan_rehearsal
    from kit.sglang.cmdline import find_launch

    launch = "python3 -m sglang.launch_server --model-path /m --speculative-algorithm EAGLE3\n"
    plain = find_launch(launch)
    holes = find_launch(launch.replace("/m", "<target-model-path>"))
    llama = {"model_type": "llama"}
    assert not_rehearsable(llama, plain, "0.5.17") is None
    assert "<target-model-path>" in not_rehearsable(llama, holes, "0.5.17")
    kw = _case_dir(tmp_path, launch.replace("/m", "<target-model-path>"))
    with pytest.raises(KitInputError, match="not rehearsable: .*placeholders"):
        plan_rehearsal(RehearsalConfig(**kw, out=str(tmp_path / "a")))
    # a dry run shows the plan with the reason, and `kit rehearse --dry-run` exits 0 (2 is for user errors)
    plan = plan_rehearsal(RehearsalConfig(**kw, out=str(tmp_path / "b"), dry_run=True))
    assert plan.blocked.startswith("not rehearsable: ") and "cannot run: not rehearsable" in plan.render()
    from kit.cli import main

    argv = [f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]
    assert main(["rehearse", *argv, f"--out={tmp_path / 'c'}", "--dry-run"]) == 0
    # a model_type neither Transformers nor SGLang knows, without its configuration code: AutoConfig raises
    from kit.sglang.loader import config_model_types

    pytest.importorskip("transformers")
    if config_model_types("0.5.17") is None:
        pytest.skip("sglang 0.5.17 source not cached")
    unknown = {"model_type": "kit_no_such_model"}
    assert "'kit_no_such_model' has no config class" in not_rehearsable(unknown, plain, "0.5.17")
    assert not_rehearsable({"model_type": "kimi_k25"}, plain, "0.5.17") is None  # SGLang's own config class
    (tmp_path / "remote").mkdir()
    (tmp_path / "remote" / "configuration_x.py").write_text("")
    shipped = {**unknown, "auto_map": {"AutoConfig": "configuration_x.XConfig"}}
    assert not_rehearsable(shipped, plain, "0.5.17", tmp_path / "remote") is None


def test_disaggregation_and_deepep_are_dropped_with_a_reason():
    env, argv = _seed()
    argv = argv + ["--disaggregation-mode", "decode", "--disaggregation-ib-device", "mlx5_0"]
    argv += ["--deepep-mode", "low_latency", "--moe-a2a-backend", "deepep"]
    _, new_argv, changes, _ = adjust_launch(env, argv, "0.5.17", "/t", "/d", 1, 31000, 0.3, "/s", "/r")
    assert not [a for a in new_argv if a.startswith(("--disaggregation", "--deepep", "--moe-a2a"))]
    dropped = {c.flag: c.original for c in changes if c.new is None and "not rehearsed" in c.reason}
    assert dropped == {
        "--disaggregation-mode": "decode",
        "--disaggregation-ib-device": "mlx5_0",
        "--deepep-mode": "low_latency",
        "--moe-a2a-backend": "deepep",
    }


def test_a_multimodal_target_carries_its_processor_files_or_the_kits_stand_in(tmp_path):
    from kit.rehearsal.miniature import MiniTarget, missing_processor, write_miniature_target
    from kit.rehearsal.runner import not_rehearsable
    from kit.sglang.cmdline import find_launch
    from kit.sglang.loader import processor_archs

    if processor_archs("0.5.17") is None:
        pytest.skip("sglang 0.5.17 source not cached")
    found = find_launch("python3 -m sglang.launch_server --model-path /m --trust-remote-code\n")
    kimi = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25"}
    src = tmp_path / "kimi"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(kimi))
    # 0.5.17 loads its processor at startup ("Unrecognized processing class" without one): the kit stands in
    assert missing_processor(kimi, src, "0.5.17") == {"KimiK25ForConditionalGeneration"}
    assert not_rehearsable(kimi, found, "0.5.17", src) is None
    assert missing_processor({**kimi, "architectures": ["LlamaForCausalLM"]}, src, "0.5.17") == frozenset()
    for f in ("tokenizer_config.json", "processor_config.json", "tiktoken.model", "kimi_k25_processor.py"):
        (src / f).write_text("{}")
    assert missing_processor(kimi, src, "0.5.17") == frozenset()  # the user's own files travel instead
    out = write_miniature_target(kimi, tmp_path / "mini", MiniTarget(config=kimi, sizes={}), src)
    assert {p.name for p in out.iterdir()} == {
        "config.json",
        "tokenizer_config.json",
        "processor_config.json",
        "tiktoken.model",
        "kimi_k25_processor.py",
    }


def test_the_stand_in_processor_is_what_sglangs_kimi_wrapper_reads(tmp_path):
    """AutoProcessor (remote code, as SGLang calls it) returns the stand-in, with every media_proc_cfg key
    SGLang 0.5.17's KimiK2_5VLImageProcessor reads and a tokenizer that knows the media token."""
    import re

    from transformers import AutoProcessor

    from kit.checkpoint.processors import STAND_IN_PROCESSORS
    from kit.rehearsal.miniature import write_stand_in_processor
    from kit.sglang.source import source_text

    out = tmp_path / "target"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"architectures": ["KimiK25ForConditionalGeneration"]}))
    note = write_stand_in_processor(out, "KimiK25ForConditionalGeneration")
    assert "stand-in" in note
    proc = AutoProcessor.from_pretrained(str(out), trust_remote_code=True, use_fast=True, revision=None)
    tok = proc.tokenizer
    media = STAND_IN_PROCESSORS["KimiK25ForConditionalGeneration"]["media_token"]
    assert tok.convert_ids_to_tokens(tok.encode(f"the {media}")) == ["the", media]
    assert proc.image_processor is proc.media_processor
    with pytest.raises(ValueError, match="no images"):
        proc(text="the", images=[object()])
    try:
        src = source_text("0.5.17", "srt/multimodal/processors/kimi_k25.py")
    except KitInputError as e:
        pytest.skip(f"sglang 0.5.17 source not available: {e}")
    read = set(re.findall(r'media_proc_cfg\[\s*"(\w+)"\s*\]', src))
    assert read and read <= set(proc.media_processor.media_proc_cfg)


def test_a_multi_node_fp8_launch_is_rehearsed_on_this_host_without_deepgemms_warm_up(tmp_path):
    """Two nodes at TP16 become one host (nnodes 1, a loopback rendezvous); an FP8 miniature target runs without
    DeepGEMM's JIT warm-up (minutes of kernel compiles before ready), unless the user's launch set the switch."""
    from kit.sglang.flags import resolve_flags

    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text('{"quantization_config": {"quant_method": "fp8"}}')
    argv = ("python -m sglang.launch_server --model-path /m --tp 16 --nnodes 2 --node-rank 0 --dist-init-addr "
            "10.0.0.1:5000 --speculative-algorithm EAGLE3 --speculative-draft-model-path /d").split()  # fmt: skip
    env, new_argv, changes, _ = adjust_launch({}, argv, "0.5.17", str(target), "/d", 1, 31000, 0.3, "/s", "/r")
    v = resolve_flags(new_argv[3:], "0.5.17").values
    assert v["nnodes"] == 1 and v["node_rank"] == 0 and v["dist_init_addr"] == "127.0.0.1:31001" and v["tp_size"] == 1
    by = {c.flag: c for c in changes}
    assert by["--nnodes"].original == "2" and "one host" in by["--nnodes"].reason
    assert env["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0" and "DeepGEMM" in by["SGLANG_ENABLE_JIT_DEEPGEMM"].reason
    kept, _, changes, _ = adjust_launch({"SGL_ENABLE_JIT_DEEPGEMM": "1"}, argv, "0.5.17", str(target), "/d", 1,
                                        31000, 0.3, "/s", "/r")  # fmt: skip
    assert "SGLANG_ENABLE_JIT_DEEPGEMM" not in kept and not any("DEEPGEMM" in c.flag for c in changes)
    bf16, _, changes, _ = adjust_launch({}, argv, "0.5.17", str(tmp_path), "/d", 1, 31000, 0.3, "/s", "/r")
    assert "SGLANG_ENABLE_JIT_DEEPGEMM" not in bf16  # no FP8 target: nothing to skip
