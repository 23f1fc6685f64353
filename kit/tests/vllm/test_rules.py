"""kit.vllm.rules on the stored table (hermetic), the release boundaries found in vLLM's wheels, and one release
re-derived from its real wheel by kit.derive.vllm_scan (skipped when the wheel cannot be had)."""

import pytest

from kit.findings import KitInputError
from kit.vllm.rules import FIELDS, default_release, releases, rules_for


def test_the_listed_releases_run_from_eagle3s_first_to_the_default():
    rs = releases()
    assert rs[0] == "0.8.5" and rs[-1] == default_release() == "0.34.0"
    assert "0.8.5.post1" in rs and "0.10.1.1" in rs and "0.8.4" not in rs
    assert rules_for().version == "0.34.0"
    assert rules_for("0.9.0.0").version == "0.9.0"  # the same release, spelled with a trailing zero


def test_every_release_has_every_field():
    for v in releases():
        r = rules_for(v)
        assert set(r.evidence) >= set(FIELDS), v
        assert r.speculative_config and r.speculative_config_json and not r.legacy_flags, v
        assert r.eagle3_methods == ("eagle3",) and r.eagle_methods == ("eagle",), v
        assert r.aux_default == "(2, num_layers // 2, num_layers - 3)", v
        assert r.draft_tp_allowed == "(1, target_tp)", v


def test_release_boundaries():
    # 0.8.5 accepts method "eagle3" without declaring it in SpeculativeMethod; and a draft path holding "eagle3-"
    # with no method given is run as EAGLE (1/2) until 0.10.2
    assert rules_for("0.8.5").evidence["methods"]["eagle3_accepted"][0] == "vllm/config.py"
    assert ("eagle- or eagle3-", "eagle") in rules_for("0.10.1.1").name_detect
    assert ("eagle3", "eagle3") in rules_for("0.10.2").name_detect
    # the draft architectures routed to the Llama EAGLE-3 class
    assert set(rules_for("0.10.1.1").draft_archs) == {"Eagle3LlamaForCausalLM"}
    assert rules_for("0.10.2").draft_archs["LlamaForCausalLMEagle3"] == "llama_eagle3.Eagle3LlamaForCausalLM"
    assert "Eagle3Qwen3ForCausalLM" not in rules_for("0.23.0").draft_archs
    assert "Eagle3Qwen3ForCausalLM" in rules_for("0.24.0").draft_archs
    # speculators-format draft configs
    assert not rules_for("0.10.0").speculators_detected
    assert rules_for("0.10.1").speculators_detected and "eagle3" in rules_for("0.10.1").speculators_algorithms
    # ... and a speculative config built from one on `vllm serve DRAFT`: not in 0.10.2 (vllm PR #25250)
    assert [rules_for(v).speculators_speculates for v in ("0.10.1", "0.10.2", "0.11.0", "0.33.0")] == [1, 0, 1, 1]
    assert "target_model_config" in rules_for("0.10.2").evidence["speculators"]["builds"][2]
    # --speculative-config's short alias
    assert "-sc" not in rules_for("0.18.1").spec_options and "-sc" in rules_for("0.19.0").spec_options
    # where the runner reads the draft's aux ids (as points): nowhere (the default), then the top level, then also
    # eagle_config, which puts SGLang-convention ids one layer early
    assert [rules_for(v).aux_ids_read for v in ("0.11.0", "0.11.1", "0.21.0", "0.22.0")] == [
        (),
        ("top",),
        ("top",),
        ("top", "nested"),
    ]


def test_the_llama_draft_loader_renames():
    """0.8.5's recorded ops, replayed: d2t renamed to the vocabulary map, t2d skipped, midlayer.* into layers.0.*,
    lm_head kept without the model. prefix; a model.-prefixed key is refused."""
    from kit.vllm.loader import vllm_load

    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "vocab_size": 100, "draft_vocab_size": 10}
    keys = ["d2t", "t2d", "midlayer.self_attn.q_proj.weight", "lm_head.weight", "fc.weight"]
    got = vllm_load(rules_for("0.8.5"), cfg, keys)
    assert got["class"] == "llama_eagle3.Eagle3LlamaForCausalLM" and not got["refused"] and not got["ignored"]
    assert "model.layers.0.self_attn.qkv_proj.weight" not in got["unfilled"]
    assert vllm_load(rules_for("0.8.5"), cfg, ["model.fc.weight"])["refused"] == ["model.fc.weight"]


def test_metrics_are_the_four_counters_throughout():
    want = {
        f"vllm:spec_decode_num_{n}_total"
        for n in ("drafts", "draft_tokens", "accepted_tokens", "accepted_tokens_per_pos")
    }
    assert {set(rules_for(v).metrics) == want for v in releases()} == {True}


def test_the_recorded_parser_has_the_serving_options():
    options = {o for a in rules_for("0.33.0").parser_flags for o in a["option_strings"]}
    assert {"--speculative-config", "-sc", "--port", "--host", "--tensor-parallel-size"} <= options
    assert [a["dest"] for a in rules_for("0.33.0").parser_flags if a["kind"] == "positional"] == ["model_tag"]


def test_the_real_parser_agrees_with_the_static_fields():
    for v in releases():
        if (r := rules_for(v)).parser_flags is None:
            continue
        spec = {a["dest"]: a for a in r.parser_flags}
        assert ("speculative_config" in spec) == r.speculative_config, v
        options = {o for a in r.parser_flags for o in a["option_strings"]}
        assert set(spec["speculative_config"]["option_strings"]) <= {"--speculative-config", *r.spec_options}, v
        assert set(r.spec_options) <= options, (v, set(r.spec_options) - options)
        if (spec.get("spec_method") or {}).get("choices"):  # 0.22.0-0.33.0 (0.34.0's lists none)
            assert set(spec["spec_method"]["choices"]) - {None, "None"} == set(r.methods) - {"[ngram]"}, v


def test_a_release_the_table_lacks_is_one_line_refusal():
    for v in ("0.8.4", "0.35.0", "1.0"):
        with pytest.raises(KitInputError, match=rf"vLLM {v} is not in") as e:
            rules_for(v)
        assert "\n" not in str(e.value)
    with pytest.raises(KitInputError, match="not a vLLM version"):
        rules_for("latest")


def test_one_release_re_derived_from_its_wheel():
    """0.10.2 (the name-detect and LlamaForCausalLMEagle3 boundary) from its real wheel, equal to the stored row."""
    from kit.derive import vllm_scan

    try:
        row = vllm_scan.derive("0.10.2")
    except KitInputError as e:
        pytest.skip(f"vllm 0.10.2 wheel unavailable: {e}")
    stored = vllm_scan.stored_rows()
    for f in FIELDS:
        assert row[f]["value"] == stored[f]["0.10.2"]["value"], f


def test_the_installed_vllm_is_judged_at_its_own_release_or_the_newest_before_it(monkeypatch):
    from kit.vllm import rules

    for installed, judged in (("0.10.2", "0.10.2"), ("0.10.2.post1", "0.10.2"), ("0.99.0", "0.34.0"), ("0.7.3", None)):
        monkeypatch.setattr(rules, "installed_version", lambda dist, v=installed: v)
        assert rules.installed_release() == judged
    monkeypatch.setattr(rules, "installed_version", lambda dist: "0.11.0")
    assert rules_for().version == "0.11.0" and rules_for("0.12.0").version == "0.12.0"
    monkeypatch.setattr(rules, "installed_version", lambda dist: None)
    assert rules_for().version == "0.34.0"


def test_the_class_each_release_names_for_a_draft():
    """EAGLEConfig's rename, then the registry: SpecForge's LlamaForCausalLMEagle3 is prefixed up to 0.10.0, kept but
    unregistered in 0.10.1 (commented out there, vLLM PRs #22333, #22611), served from 0.10.2."""
    from kit.vllm.checks import draft_class

    specforge, qwen3 = {"architectures": ["LlamaForCausalLMEagle3"]}, {"architectures": ["Qwen3ForCausalLM"]}
    assert rules_for("0.8.5").draft_rename is None  # one EAGLE-3 class, whatever the draft names
    assert draft_class(rules_for("0.9.0"), specforge)[1] == "Eagle3LlamaForCausalLMEagle3"
    served = lambda v, cfg: draft_class(rules_for(v), cfg)[1] in rules_for(v).draft_archs
    assert [served(v, specforge) for v in ("0.9.0", "0.10.1", "0.10.2", "0.33.0")] == [False, False, True, True]
    assert [served(v, qwen3) for v in ("0.23.0", "0.24.0")] == [False, True]
    assert served("0.9.0", {"architectures": ["LlamaForCausalLM"]})  # the official EAGLE-3 release's name


def test_the_model_runner_decision_is_derived_as_steps():
    """`use_v2_model_runner`'s body as kit.derive.vllm_scan reads it: the environment step left out, locals inlined,
    `any(... for arch in architectures)` as `target_listed`, elif branches with the earlier test negated."""
    import ast

    from kit.derive.vllm_scan import _appended, _steps

    src = ast.parse(
        "def use_v2_model_runner(self):\n"
        "    v = envs.VLLM_USE_V2_MODEL_RUNNER\n"
        "    if v is not None:\n"
        "        return v\n"
        "    model_config = self.model_config\n"
        "    listed = any(a in TABLE for a in model_config.architectures)\n"
        "    if not listed:\n"
        "        logger.warning('first runner')\n"
        "        return False\n"
        "    return not model_config.is_moe\n"
        "def _get_v2_model_runner_unsupported_features(self):\n"
        "    spec = self.speculative_config\n"
        "    if spec is not None:\n"
        "        if spec.method == 'ngram':\n"
        "            unsupported.append('ngram')\n"
        "        elif spec.method != 'eagle3':\n"
        "            unsupported.append(f'method {spec.method}')\n"
    )
    use, unsupported = src.body
    assert _steps(use.body, {}) == [["not target_listed", "False"], ["True", "not self.model_config.is_moe"]]
    assert _appended(unsupported.body, {}, []) == [
        ["(self.speculative_config is not None) and (self.speculative_config.method == 'ngram')", "'ngram'"],
        [
            "(self.speculative_config is not None) and (not (self.speculative_config.method == 'ngram')) and "
            "(self.speculative_config.method != 'eagle3')",
            "f'method {self.speculative_config.method}'",
        ],
    ]
