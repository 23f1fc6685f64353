"""`kit doctor --launch "vllm serve ..."`: the deployment the SGLang line makes, judged by the same checks, plus what
only the vLLM release decides (kit.vllm.checks). One input that raises each vLLM code and a near miss that must not;
the wrong algorithm is `aux.algorithm` on both engines. The release's rules are written here (`RULES`), so these tests
do not move with the derived table (kit/tests/vllm/test_corpus.py judges real releases).

Run: python -m pytest -q -n 0 kit/tests/vllm/test_checks.py
"""

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from kit.doctor import DoctorConfig, diagnose
from kit.preflight import launch_report
from kit.serving.launch import spec_from_command
from kit.vllm import checks, loader, runner
from kit.vllm.rules import VllmRules, rules_for

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from corpus_cases import load_configs, no_side_env_builds, weight_spec, write_sparse_safetensors  # noqa: E402


def act(*opts, kind="store", nargs=None, type=None, choices=None):
    """One option as kit.derive.vllm_scan records vLLM's parser (kit.derive.flag_scan.DESCRIBE's form)."""
    dest = opts[0].lstrip("-").replace("-", "_")
    return dict(
        option_strings=list(opts), dest=dest, kind=kind, nargs=nargs, type=type, choices=choices, required=False
    )


# a few of `vllm serve`'s options, as 0.10.1's parser has them
PARSER_FLAGS = (
    act("--model", type="builtins.str"),
    act("--port", type="builtins.int"),
    act("--tensor-parallel-size", "-tp", type="builtins.int"),
    act("--max-model-len", type="vllm.engine.arg_utils.human_readable_int"),
    act("--enforce-eager", "--no-enforce-eager", kind="boolean_optional", nargs=0),
    act("--speculative-config", "-sc", type="vllm.engine.arg_utils.parse_type.<locals>._parse_type"),
    act("--kv-cache-dtype", choices=["auto", "fp8"], type="builtins.str"),
)
RULES = VllmRules(
    version="0.10.1",
    methods=("deepseek_mtp", "draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "ngram"),
    eagle3_methods=("eagle3",),
    eagle_methods=("eagle",),
    name_detect=(("eagle3-", "eagle"),),
    speculative_config=True,
    speculative_config_json=True,
    legacy_flags=(),
    spec_options=(),
    aux_archs=("LlamaForCausalLM", "Qwen3ForCausalLM"),
    aux_default="(2, num_layers // 2, num_layers - 3)",
    aux_ids_read=("top", "nested"),
    aux_overrides={},
    draft_archs={},
    draft_loaders={},
    draft_rename=None,
    draft_tp_allowed="(1, target_tp)",
    draft_tp_checks=(),
    speculators_detected=True,
    speculators_speculates=True,
    speculators_algorithms=("eagle3",),
    metrics=(),
    parser_flags=PARSER_FLAGS,
    evidence={},
)
LLAMA, QWEN_MOE = "target/llama-3.1-8b-instruct.json", "target/qwen3-30b-a3b.json"
EAGLE3_DRAFT = "draft/specforge-llama3-8B-eagle3.json"  # LlamaForCausalLMEagle3
OFFICIAL_DRAFT = "draft/official-eagle3-llama31-8b.json"  # the official release: a plain LlamaForCausalLM config


@pytest.fixture(autouse=True)
def rules(monkeypatch):
    monkeypatch.setattr(
        checks, "rules_for", lambda version=None: dataclasses.replace(RULES, version=version or "0.10.1")
    )
    with no_side_env_builds():
        yield


def models(tmp_path, target=LLAMA, draft=EAGLE3_DRAFT, fc_width=None):
    """A target config and a draft (config + a safetensors header of its tensors) from the corpus's configs."""
    t, d = tmp_path / "target", tmp_path / "draft"
    t.mkdir(parents=True), d.mkdir(parents=True)
    (t / "config.json").write_text(json.dumps(load_configs()[target]["config"]))
    cfg = load_configs()[draft]["config"]
    (d / "config.json").write_text(json.dumps(cfg))
    spec = weight_spec(cfg, "midlayer")
    if fc_width:  # an EAGLE-1 head: fc over [embedding, hidden state]
        spec["fc.weight"] = (spec["fc.weight"][0], (cfg["hidden_size"], fc_width))
    write_sparse_safetensors(d / "model.safetensors", spec, cfg)
    return str(t), str(d)


def doctor(tmp_path, line, **kw):
    t, d = models(tmp_path, **kw)
    return diagnose(DoctorConfig(target=t, draft=d, launch=line))


def codes(report, severity="error"):
    return {f.code for f in report.findings if f.severity == severity}


def vllm(spec: dict, flags: str = "-tp 1") -> str:
    return f"vllm serve meta-llama/Llama-3.1-8B-Instruct {flags} --speculative-config '{json.dumps(spec)}'"


EAGLE3 = {"method": "eagle3", "model": "D", "num_speculative_tokens": 3}


def test_healthy_line_gives_no_error(tmp_path):
    rep = doctor(tmp_path, vllm(EAGLE3, "-tp 8 --max-model-len 2048 --port 8001"))
    assert not codes(rep), [f.title for f in rep.findings if f.severity == "error"]
    # SGLang's own mechanics do not judge a vLLM line; the engine-neutral checks do
    assert not {"launch.flag", "launch.parser", "draft.arch", "draft.context_short"} & {f.code for f in rep.findings}


def test_the_same_line_on_sglang_is_judged_by_sglang(tmp_path):
    sg = spec_from_command(vllm(EAGLE3)).command("sglang")
    assert "--speculative-algorithm EAGLE3" in sg and "--speculative-num-draft-tokens 4" in sg


@pytest.mark.parametrize("draft", [EAGLE3_DRAFT, OFFICIAL_DRAFT])
def test_wrong_algorithm_is_one_code_on_both_engines(tmp_path, draft):
    sglang = (
        "python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE --speculative-draft-model-path D "
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
    )
    on_vllm = doctor(tmp_path / "v", vllm({**EAGLE3, "method": "eagle"}), draft=draft)
    assert "aux.algorithm" in codes(on_vllm)
    [f] = [f for f in on_vllm.findings if f.code == "aux.algorithm"]
    assert "vLLM" in f.title and '"method": "eagle3"' in f.fix
    if draft == EAGLE3_DRAFT:  # SGLang's check reads the draft's config (the official one names a plain Llama class)
        assert "aux.algorithm" in codes(doctor(tmp_path / "s", sglang, draft=draft))
    assert "aux.algorithm" not in codes(doctor(tmp_path / "ok", vllm(EAGLE3), draft=draft))


def test_eagle_method_with_an_eagle1_draft_is_no_fault(tmp_path):
    cfg = load_configs()[OFFICIAL_DRAFT]["config"]
    rep = doctor(tmp_path, vllm({**EAGLE3, "method": "eagle"}), draft=OFFICIAL_DRAFT, fc_width=2 * cfg["hidden_size"])
    assert "aux.algorithm" not in codes(rep)


def test_method_detected_from_the_draft_path(tmp_path):
    """No method: the release's own detection (here: an `eagle3-` path means "eagle") decides."""
    rep = doctor(tmp_path, vllm({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}))
    [f] = [f for f in rep.findings if f.code == "aux.algorithm"]
    assert "detected from the draft path" in f.title


def test_malformed_config(tmp_path):
    bad = doctor(tmp_path / "b", 'vllm serve T --speculative-config "{"method": "eagle3"}"')
    [f] = [f for f in bad.findings if f.code == "launch.vllm_config"]
    assert f.severity == "error" and "vLLM 0.10.1" in f.title and "Expecting property name" in f.title
    assert "launch.vllm_config" not in codes(doctor(tmp_path / "g", vllm(EAGLE3)))


def test_a_key_speculative_config_does_not_take(tmp_path, monkeypatch):
    """The JSON becomes SpeculativeConfig's keyword arguments: a key it has no field for stops startup (vLLM 0.9.0:
    TypeError "unexpected keyword argument 'dtype'"; 0.24.0: pydantic's "Unexpected keyword argument";
    bench/vllm_corpus.py runs both)."""
    keyed = dataclasses.replace(RULES, spec_keys=("method", "model", "num_speculative_tokens"))
    monkeypatch.setattr(checks, "rules_for", lambda version=None: keyed)
    [f] = [
        f
        for f in doctor(tmp_path / "b", vllm({**EAGLE3, "dtype": "float16"})).findings
        if f.code == "launch.vllm_config"
    ]
    assert "'dtype'" in f.title and f.fix == "drop dtype from --speculative-config"
    assert "launch.vllm_config" not in codes(doctor(tmp_path / "g", vllm(EAGLE3)))


def test_method_the_release_does_not_accept(tmp_path):
    assert "launch.vllm_method" in codes(doctor(tmp_path / "b", vllm({**EAGLE3, "method": "eagle-3"})))
    assert "launch.vllm_method" not in codes(doctor(tmp_path / "g", vllm(EAGLE3)))


def test_legacy_flags_the_release_no_longer_has(tmp_path, monkeypatch):
    line = "vllm serve T --speculative-model D --num-speculative-tokens 3"
    [f] = [f for f in doctor(tmp_path / "b", line).findings if f.code == "launch.vllm_flag"]
    assert f.severity == "error" and '"model": "D"' in f.fix and '"num_speculative_tokens": 3' in f.fix
    old = dataclasses.replace(RULES, legacy_flags=("--speculative-model", "--num-speculative-tokens"))
    monkeypatch.setattr(checks, "rules_for", lambda version=None: old)
    assert "launch.vllm_flag" not in codes(doctor(tmp_path / "g", line))


def test_flags_judged_by_the_releases_own_parser(tmp_path, monkeypatch):
    """An SGLang flag on a vLLM line, a bad int, a value outside the choices: `launch.flag`, judged by the recorded
    parser after vLLM's own rewriting (`_` for `-`, `--json-arg.key value`), so those spellings are no fault."""
    ok = doctor(
        tmp_path / "ok", vllm(EAGLE3, "--max_model_len=4096 --speculative-config.method eagle3 --enforce-eager")
    )
    assert not {"launch.flag", "launch.parser"} & {f.code for f in ok.findings}
    bad = doctor(tmp_path / "b", vllm(EAGLE3, "--speculative-num-steps 3 --port eighty --kv-cache-dtype fp4"))
    titles = sorted(f.title for f in bad.findings if f.code == "launch.flag" and f.severity == "error")
    assert titles[0] == "vLLM does not accept '--speculative-num-steps': the server would exit at startup"
    assert any("invalid int value: 'eighty'" in t for t in titles) and any("'fp4'" in t for t in titles), titles
    assert "launch.vllm_flag" not in codes(bad)  # not a flag of older vLLM: an unknown one
    monkeypatch.setattr(checks, "rules_for", lambda version=None: dataclasses.replace(RULES, parser_flags=None))
    [f] = [f for f in doctor(tmp_path / "n", vllm(EAGLE3)).findings if f.code == "launch.parser"]
    assert f.severity == "warning" and "not checked" in f.title


def test_a_draft_class_the_release_does_not_have(tmp_path, monkeypatch):
    """EAGLEConfig renames the draft's architecture (0.10.2 on: kept when it starts or ends with Eagle3, else
    prefixed), then the registry must hold that class: SpecForge's LlamaForCausalLMEagle3 is kept as it is."""
    rename = "lambda arch: arch if arch.startswith('Eagle3') or arch.endswith('Eagle3') else f'Eagle3{arch}'"
    only = {"Eagle3LlamaForCausalLM": "llama_eagle3.Eagle3LlamaForCausalLM"}
    with_it = {**only, "LlamaForCausalLMEagle3": "llama_eagle3.Eagle3LlamaForCausalLM"}
    for archs, draft, bad in [
        (only, EAGLE3_DRAFT, True),
        (with_it, EAGLE3_DRAFT, False),
        (only, OFFICIAL_DRAFT, False),
    ]:
        r = dataclasses.replace(RULES, draft_rename=rename, draft_archs=archs)
        monkeypatch.setattr(checks, "rules_for", lambda version=None, r=r: r)
        rep = doctor(tmp_path / f"{len(archs)}{draft[6:10]}", vllm(EAGLE3), draft=draft)
        found = [f.title for f in rep.findings if f.code == "draft.arch"]
        assert len(found) == bad, found
        assert not bad or "class LlamaForCausalLMEagle3 (from its architecture LlamaForCausalLMEagle3)" in found[0]
    qwen = {"architectures": ["Qwen3ForCausalLM"]}
    assert loader.draft_class(r, qwen) == ("Qwen3ForCausalLM", "Eagle3Qwen3ForCausalLM")
    assert loader.draft_class(RULES, qwen) is None  # a release that loads its one EAGLE-3 class


def test_draft_tp_the_release_does_not_allow(tmp_path):
    bad = doctor(tmp_path / "b", vllm({**EAGLE3, "draft_tensor_parallel_size": 2}, "-tp 4"))
    assert "launch.vllm_draft_tp" in codes(bad)
    for ok in (1, 4):
        good = doctor(tmp_path / f"g{ok}", vllm({**EAGLE3, "draft_tensor_parallel_size": ok}, "-tp 4"))
        assert "launch.vllm_draft_tp" not in codes(good)


def test_target_without_aux_hidden_states(tmp_path):
    rep = doctor(tmp_path / "b", vllm(EAGLE3), target=QWEN_MOE, draft="draft/specforge-qwen3-30B-A3B-eagle3.json")
    [f] = [f for f in rep.findings if f.code == "aux.vllm_target"]
    assert "Qwen3MoeForCausalLM" in f.title and "vLLM 0.10.1" in f.title
    assert "aux.vllm_target" not in codes(doctor(tmp_path / "g", vllm(EAGLE3)))  # Llama: listed
    assert "aux.vllm_target" not in codes(doctor(tmp_path / "e", vllm({**EAGLE3, "method": "eagle"}), target=QWEN_MOE))


def test_kit_launch_dry_run_judges_the_vllm_line(tmp_path):
    t, d = models(tmp_path, target=QWEN_MOE, draft="draft/specforge-qwen3-30B-A3B-eagle3.json")
    spec = spec_from_command(vllm({**EAGLE3, "model": d}).replace("meta-llama/Llama-3.1-8B-Instruct", t))
    assert "aux.vllm_target" in codes(launch_report(spec, engine="vllm"))
    assert "aux.vllm_target" not in codes(launch_report(spec, engine="sglang"))


def test_aux_ids_one_layer_early_on_vllm_where_sglang_serves_the_trained_points(tmp_path, monkeypatch):
    """SpecForge ids under eagle_config ([1, 15, 28]; SGLang adds 1 on Llama, so the draft trained on points 2, 16,
    29) read as points by a release that reads eagle_config: one layer early, `aux.layer_shift` naming vLLM. A release
    that reads only the top level serves its default, the trained points; SGLang serves them too. The fault of
    vllm-project/vllm PR #43671 (MiniMax-M2.5 with thoughtworks/MiniMax-M2.5-Eagle3, trained against SGLang: first
    position accepted ~10% of the time instead of ~45%)."""
    t, d = models(tmp_path)
    cfg = json.loads((Path(d) / "config.json").read_text())
    cfg["eagle_config"] = {**cfg.get("eagle_config", {}), "eagle_aux_hidden_state_layer_ids": [1, 15, 28]}
    (Path(d) / "config.json").write_text(json.dumps(cfg))
    run = lambda line: diagnose(DoctorConfig(target=t, draft=d, launch=line, trained_with="specforge"))
    [f] = [f for f in run(vllm(EAGLE3)).findings if f.code == "aux.layer_shift"]
    assert f.severity == "error" and f.evidence["serving_points"] == [1, 15, 28]
    assert f.evidence["training_points"] == [2, 16, 29] and "vLLM" in f.title and "[2, 16, 29]" in f.fix
    sglang = (
        f"python -m sglang.launch_server --model-path {t} --speculative-algorithm EAGLE3 --speculative-draft-model-path "
        f"{d} --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
    )
    assert "aux.layer_shift" not in codes(run(sglang))
    top_only = dataclasses.replace(RULES, aux_ids_read=("top",))
    monkeypatch.setattr(checks, "rules_for", lambda version=None: top_only)
    assert "aux.layer_shift" not in codes(run(vllm(EAGLE3)))
    # the second model runner's EAGLE-3 helper reads only the top level: the default points again, where the release
    # serves the deployment on it (kit.vllm.runner.second_runner, the real releases' rules)
    monkeypatch.setattr(checks, "rules_for", rules_for)
    at = lambda version, line=vllm(EAGLE3): codes(
        diagnose(DoctorConfig(target=t, draft=d, launch=line, trained_with="specforge", vllm_version=version))
    )
    assert "aux.layer_shift" in at("0.22.0")  # its second runner is the default for Qwen3 only
    assert "aux.layer_shift" not in at("0.24.0")  # Llama is listed
    assert "aux.layer_shift" not in at("0.26.0")  # 0.25.0 on: every dense target
    assert "aux.layer_shift" in at("0.24.0", "VLLM_USE_V2_MODEL_RUNNER=0 " + vllm(EAGLE3))
    # a feature the second runner lacks keeps the first: EAGLE-3 with pipeline parallelism, through 0.29.0
    assert "aux.layer_shift" in at("0.24.0", vllm(EAGLE3) + " --pipeline-parallel-size 2")
    assert "aux.layer_shift" not in at("0.30.0", vllm(EAGLE3) + " --pipeline-parallel-size 2")


@pytest.mark.parametrize(
    "version, target, flags, second, why",
    [
        ("0.21.0", LLAMA, "", False, "picks no runner"),
        ("0.23.0", LLAMA, "", True, "default"),
        (
            "0.23.0",
            LLAMA,
            "--quantization fp8",
            False,
            "is_quantized",
        ),  # 0.22.x-0.23.0: quantized targets keep the first
        ("0.24.0", LLAMA, "--quantization fp8", True, "default"),
        ("0.24.0", QWEN_MOE, "", False, "target_listed: False"),  # not listed, and MoE
        ("0.25.0", "target/gpt-oss-20b.json", "", False, "is_moe"),  # not listed, MoE
        ("0.26.0", "target/qwen2.5-0.5b-instruct.json", "", True, "default"),  # not listed: every dense target
        ("0.24.0", LLAMA, "--enable-prompt-embeds", False, "does not support prompt embeds"),
        ("0.29.0", QWEN_MOE, "", True, "default"),  # every target
    ],
)
def test_which_model_runner_serves_the_deployment(tmp_path, monkeypatch, version, target, flags, second, why):
    """`use_v2_model_runner` as each release derives it: its default targets (listed, MoE, quantized) and the
    features its second runner lacks, from the launch's flags and the target's config.json."""
    from types import SimpleNamespace

    from kit.vllm.cmdline import read_argv

    rules = rules_for(version)
    v = read_argv([*vllm(EAGLE3).split()[:2], "T", *flags.split(), "--speculative-config", json.dumps(EAGLE3)], rules)
    dep = SimpleNamespace(target_config=load_configs()[target]["config"], launch=None)
    got, reason = runner.second_runner(rules, dep, v, "eagle3")
    assert got is second and why in reason


def test_vllm_serve_of_a_speculators_draft_serves_its_verifier(tmp_path, monkeypatch):
    """`vllm serve DRAFT` (the speculators model cards' line): vLLM reads the draft's speculators config and serves
    its verifier with it; a release that does not detect the format serves the draft itself (and stops on it named in
    --speculative-config), and one that detects it without building a speculative config serves the verifier alone."""
    from kit.checkpoint.layouts import sglang_to_speculators_config
    from kit.hf import HFConfig
    from kit.vllm.cmdline import read_argv

    t, d = models(tmp_path)
    cfg = HFConfig.of(json.loads((Path(d) / "config.json").read_text()))
    (Path(d) / "config.json").write_text(json.dumps(sglang_to_speculators_config(cfg, verifier=t)))
    v = read_argv(["vllm", "serve", d, "-tp", "1"])
    assert (v.auto, v.target, v.draft, v.method, v.spec["num_speculative_tokens"]) == (True, t, d, "eagle3", 3)
    assert not read_argv(["vllm", "serve", t]).auto  # a plain model: no speculation
    assert not codes(diagnose(DoctorConfig(launch=f"vllm serve {d}")))
    undetected = dataclasses.replace(RULES, speculators_detected=False)
    monkeypatch.setattr(checks, "rules_for", lambda version=None: undetected)
    [f] = [f for f in diagnose(DoctorConfig(launch=f"vllm serve {d}")).findings if f.code == "launch.vllm_speculators"]
    assert f.severity == "error" and f"vllm serve {t} --speculative-config" in f.fix
    # the same draft named in --speculative-config: its config.json has no model_type (vLLM 0.9.0: "Unrecognized
    # model ... Should have a `model_type` key", bench/vllm_loader.py)
    named = diagnose(DoctorConfig(target=t, draft=d, launch=vllm({**EAGLE3, "model": d}))).findings
    [f] = [f for f in named if f.code == "launch.vllm_speculators"]
    assert "does not read a speculators-format draft config" in f.title and "--to sglang" in f.fix
    # 0.10.2 detects the format and serves the verifier, but builds no speculative config from the draft (PR #25250)
    silent = dataclasses.replace(RULES, speculators_speculates=False)
    monkeypatch.setattr(checks, "rules_for", lambda version=None: silent)
    [f] = [f for f in diagnose(DoctorConfig(launch=f"vllm serve {d}")).findings if f.code == "launch.vllm_speculators"]
    assert "runs without speculation" in f.title and f"vllm serve {t} --speculative-config" in f.fix


@pytest.mark.parametrize(
    "version, edit, code",
    [
        ("0.24.0", lambda k: k, None),  # SpecForge's keys: midlayer.* renamed to layers.0.*, q/k/v and gate/up fused
        ("0.24.0", lambda k: {n.replace("midlayer.", "layers.0."): v for n, v in k.items()}, None),  # speculators'
        (
            "0.24.0",
            lambda k: {(n if n == "lm_head.weight" else "model." + n): v for n, v in k.items()},
            "draft.vllm_keys",
        ),
        ("0.24.0", lambda k: k | {"midlayer.self_attn.q_norm.weight": ("BF16", (128,))}, "draft.vllm_keys"),
        ("0.24.0", lambda k: k | {"fc.bias": ("BF16", (4096,))}, "draft.vllm_keys"),  # KeyError
        ("0.33.0", lambda k: k | {"fc.bias": ("BF16", (4096,))}, "draft.keys_dropped"),  # let pass unloaded
        ("0.24.0", lambda k: {n: v for n, v in k.items() if n != "fc.weight"}, "draft.params_missing"),
    ],
)
def test_draft_keys_through_the_releases_loader(tmp_path, monkeypatch, version, edit, code):
    """A draft's checkpoint keys on a vLLM line, through that release's EAGLE-3 loader rules (kit.vllm.loader.vllm_load;
    bench/vllm_loader.py runs vLLM's own loader on the same variants): a key its class has no parameter for stops
    startup, a `.bias` its AutoWeightsLoader lets pass (0.25.0 on) is dropped silently, an unfilled parameter stays
    at its initial value; SGLang's loader rules do not speak for vLLM's class."""
    monkeypatch.setattr(checks, "rules_for", rules_for)
    t, d = models(tmp_path)
    cfg = load_configs()[EAGLE3_DRAFT]["config"]
    write_sparse_safetensors(Path(d) / "model.safetensors", edit(weight_spec(cfg, "midlayer")), cfg)
    line = vllm({**EAGLE3, "model": d})
    found = codes(diagnose(DoctorConfig(target=t, draft=d, launch=line, vllm_version=version)))
    vllm_codes = {"draft.vllm_keys", "draft.keys_dropped", "draft.params_missing"}
    assert found & vllm_codes == ({code} if code else set()), found


def test_an_embedding_the_decoder_model_builds_only_with_pipeline_parallelism():
    """vLLM 0.9.0 and 0.9.0.1: `if get_pp_group().world_size > 1: self.embed_tokens = ...` (the draft shares the
    target's otherwise), derived as `embed_if`; 0.9.1 builds it always."""
    from kit.vllm.loader import vllm_load

    cfg = load_configs()["draft/official-eagle3-llama31-8b.json"]["config"]  # an architecture 0.9.0 serves
    keys = [*weight_spec(cfg, "midlayer"), "embed_tokens.weight"]
    assert [
        rules_for(v).draft_loaders["llama_eagle3.Eagle3LlamaForCausalLM"].get("embed_if") for v in ("0.9.0", "0.9.1")
    ] == ["pp > 1", None]
    assert vllm_load(rules_for("0.9.0"), cfg, keys)["refused"] == ["embed_tokens.weight"]
    assert vllm_load(rules_for("0.9.0"), cfg, keys, pp=2)["refused"] == []
    assert vllm_load(rules_for("0.9.1"), cfg, keys)["refused"] == []


def test_the_mla_class_and_the_fields_a_release_reads():
    """vLLM's DeepSeek-V2 MLA draft class (deepseek_eagle3.py, 0.18.0 on) is modelled as its Llama one is: to 0.24.0
    its decoder model passes over a name it has no parameter for (`skip_unknown`), from 0.25.0 AutoWeightsLoader
    refuses it; a stacked key with no fused parameter (no q_lora_rank) is a KeyError. Fc norms are built where the
    release's class reads `fc_norm` (0.22.0 on), sized by `num_aux_hidden_states` before the aux ids; q/k/v biases
    where it reads `attention_bias` (0.16.0 on).
    bench/vllm_loader.py runs vLLM 0.24.0's own loader on these variants."""
    from kit.vllm.loader import vllm_load

    outcome = lambda v, cfg, keys: {k: x for k, x in vllm_load(rules_for(v), cfg, keys).items() if x and k != "class"}
    mla = {"architectures": ["Eagle3DeepseekV3ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 64}
    mla |= {"vocab_size": 1000, "draft_vocab_size": 100, "q_lora_rank": 16, "kv_lora_rank": 8}
    attn = ("q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj")
    layer = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")
    keys = [f"midlayer.self_attn.{n}.weight" for n in attn] + [f"midlayer.{n}.weight" for n in layer]
    keys += ["midlayer.hidden_norm.weight", "fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"]
    assert outcome("0.24.0", mla, keys) == {}
    q_norm = "midlayer.self_attn.q_norm.weight"
    assert outcome("0.24.0", mla, [*keys, q_norm]) == {"ignored": [q_norm]}
    assert outcome("0.25.0", mla, [*keys, q_norm]) == {"refused": [q_norm]}
    no_lora = outcome("0.24.0", mla | {"q_lora_rank": None}, keys)
    assert no_lora["refused"] == ["midlayer.self_attn.q_a_proj.weight", "midlayer.self_attn.kv_a_proj_with_mqa.weight"]

    llama = load_configs()[EAGLE3_DRAFT]["config"] | {"fc_norm": True, "num_aux_hidden_states": 2}
    norms = ["fc_norm.0.weight", "fc_norm.1.weight"]
    keys = [*weight_spec(load_configs()[EAGLE3_DRAFT]["config"], "midlayer"), *norms]
    assert outcome("0.24.0", llama, keys) == {}
    assert outcome("0.24.0", llama | {"num_aux_hidden_states": None}, keys) == {"unfilled": ["model.fc_norm.2.weight"]}
    assert outcome("0.21.0", llama, keys) == {"refused": norms}
    # q/k/v biases: the class's own qkv_proj takes attention_bias from 0.16.0 (before: no bias, a KeyError)
    biases = [f"midlayer.self_attn.{n}_proj.bias" for n in "qkvo"]
    biased = load_configs()[EAGLE3_DRAFT]["config"] | {"attention_bias": True}
    assert outcome("0.10.2", biased, [*keys[:-2], *biases]) == {"refused": biases[:3]}
    assert outcome("0.16.0", biased, [*keys[:-2], *biases]) == {}


def test_a_model_type_vllm_rewrites_before_the_eagle3_rename():
    """SpeculativeConfig.hf_config_override gives any draft of model_type deepseek_v3 the architecture DeepSeekMTPModel
    before EAGLEConfig renames it (derived as `draft_override`), so an MLA EAGLE-3 draft declared deepseek_v3 asks for
    Eagle3DeepSeekMTPModel, which no release registers: vLLM 0.24.0 stops with "Model architectures
    ['Eagle3DeepSeekMTPModel'] are not supported" (bench/vllm_loader.py); deepseek_v2 reaches the MLA class."""
    mla = {"architectures": ["Eagle3DeepseekV3ForCausalLM"], "model_type": "deepseek_v2", "kv_lora_rank": 8}
    rules = rules_for("0.24.0")
    assert loader.draft_class(rules, mla)[1] in rules.draft_archs
    seen = checks.model_findings(rules, "eagle3", "given", None, mla | {"model_type": "deepseek_v3"}, True)
    assert [f.code for f in seen] == ["draft.arch"] and "Eagle3DeepSeekMTPModel" in seen[0].title, seen
    assert "deepseek_v2" in seen[0].fix
    assert not checks.model_findings(rules, "eagle3", "given", None, mla, True)
