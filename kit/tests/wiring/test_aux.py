"""kit.wiring.aux / kit.wiring.checks / kit.derive.capture_scan: id conventions, SGLang rules derived from source, wiring findings.

Static checks run on config dicts only (a Kimi-K2.5-sized config ships in kit/tests/data). The
rule table is re-derived from real SGLang wheels when they can be fetched (cached by
kit.sglang.source); offline, those tests skip.
"""

import json
import sys
from pathlib import Path

import pytest

from kit.derive.capture_scan import classify, run_method
from kit.wiring import aux
from kit.wiring.checks import wiring_checks
from kit.wiring.plan import wiring_from_launch

DATA = Path(__file__).parents[1] / "data"
KIMI_PATH = Path(__file__).parents[2] / "examples" / "kimi_k25_config.json"
KIMI = json.loads((KIMI_PATH).read_text())
LLAMA_T = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 30, "hidden_size": 576}
EAGLE3 = ["--speculative-algorithm", "EAGLE3"]


def sgl_draft(ids=None, H=7168, **kw):
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": H,
        "num_attention_heads": 64,
        "draft_vocab_size": 32000,
        "vocab_size": 163840,
        **kw,
    }
    if ids is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
    return cfg


def codes(findings):
    return [f.code for f in findings]


# -- conventions ---------------------------------------------------------------------------
def test_capture_points_per_stack():
    L = 30
    assert aux.capture_points("vllm", [1, 14, 26], L) == [1, 14, 26]
    assert aux.capture_points("speculators", None, L) == [2, 15, 27]
    assert aux.capture_points("eagle", [9, 9, 9], L) == [2, 15, 27]
    assert aux.capture_points("sglang", [1, 14, 26], L, "LlamaForCausalLM", "0.5.23") == [2, 15, 27]
    assert aux.capture_points("sglang", None, L, "LlamaForCausalLM", "0.5.23") == [2, 15, 27]
    assert aux.capture_points("specforge", None, L, "LlamaForCausalLM", "0.5.23") == [2, 15, 27]
    assert aux.capture_points("specforge-hf", [1, 14, 26], L) == [2, 15, 27]


@pytest.mark.parametrize(
    "version,ids,points",
    [
        ("0.5.23", [1, 29, 57], [2, 30, 58]),  # PR #25454: first id 1 -> +1
        ("0.5.23", [2, 30, 58], [2, 30, 58]),  # first id 2 -> as-is
        ("0.5.12", [2, 30, 58], [3, 31, 59]),  # before #25454: unconditional +1
    ],
)
def test_kimi_conditional_shift_by_version(version, ids, points):
    assert aux.capture_points("sglang", ids, 61, "KimiK25ForConditionalGeneration", version) == points


def test_gptoss_and_minimax_rules():
    assert aux.capture_points("sglang", [24, 30, 36], 36, "GptOssForCausalLM", "0.5.23") == [24, 30, 36]
    assert aux.capture_points("sglang", [1, 17, 32], 36, "GptOssForCausalLM", "0.5.23") == [2, 18, 33]
    assert aux.capture_points("sglang", None, 40, "MiniMaxM3SparseForConditionalGeneration", "0.5.23") == [3, 21, 38]


def test_read_ids_where_each_stack_reads():
    cfg = {"eagle_aux_hidden_state_layer_ids": [2, 15, 27]}
    assert aux.read_ids("sglang", cfg) == (None, "absent")  # top level is not read
    assert aux.read_ids("speculators", cfg)[0] == [2, 15, 27]
    assert aux.read_ids("vllm", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1]}})[0] == [1]


def test_version_resolution_picks_older_recorded_release():
    from kit.sglang.capture import capture_rule, recorded_release

    rel = recorded_release("0.5.24")
    assert (rel.checked, rel.exact) == ("0.5.23", False)
    assert capture_rule("KimiK25ForConditionalGeneration", "0.5.8") is None  # added later
    assert capture_rule("LlamaForCausalLM", "0.4.6")["explicit"] == "ignored"  # took no ids


# -- rules derived by executing real method bodies -----------------------------------------
PLUS1 = """
def set_eagle3_layers_to_capture(self, layer_ids=None):
    if not self.pp_group.is_last_rank:
        return
    if layer_ids is None:
        num_layers = self.config.num_hidden_layers
        self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
    else:
        self.model.layers_to_capture = [val + 1 for val in layer_ids]
"""
DEEPSEEK = PLUS1.replace(
    "[val + 1 for val in layer_ids]", "[val + 1 for val in layer_ids] if layer_ids[0] == 1 else list(layer_ids)"
)


def test_classify_executes_method_bodies():
    from kit.derive.capture_scan import PROBES

    assert classify({k: run_method(PLUS1, v) for k, v in PROBES.items()})["explicit"] == "plus1"
    assert classify({k: run_method(DEEPSEEK, v) for k, v in PROBES.items()})["explicit"] == "plus1_if_first_is_1"
    r = classify(
        {
            k: run_method(
                "def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
                "    self.language_model.set_eagle3_layers_to_capture(layer_ids)\n",
                v,
            )
            for k, v in PROBES.items()
        }
    )
    assert r["rule"] == "delegates" and r["to"] == "language_model"


def _wheel_or_skip(version):
    from kit.findings import KitInputError
    from kit.sglang.source import source_root

    try:
        source_root(version)
    except KitInputError as e:
        pytest.skip(f"sglang {version} source unavailable offline: {e}")


@pytest.mark.parametrize(
    "version", ["0.5.23", pytest.param("0.5.12", marks=pytest.mark.slow), pytest.param("0.4.6", marks=pytest.mark.slow)]
)
def test_recorded_table_matches_real_sglang_source(version):
    _wheel_or_skip(version)
    from kit.derive.capture_scan import derive
    from kit.sglang.capture import table

    recorded = table()["versions"][version]
    assert derive(version) == recorded


def test_table_agrees_with_formats_doc_for_0_5_23():
    from kit.sglang.capture import table

    rec = table()["versions"]["0.5.23"]
    n = sum(len(a) for a in rec["rules"].values())
    assert n == 71  # every class that sets aux capture in 0.5.23's source
    assert "KimiK25ForConditionalGeneration" in rec["rules"]["2,L//2,L-3|plus1_if_first_is_1"]
    assert rec["id_source"]["reads"] == "nested_only"


# -- static wiring findings ----------------------------------------------------------------
def test_seed_launch_algorithm_eagle():
    from kit.sglang.cmdline import split_command

    env, argv = split_command((DATA / "seed_launch.sh").read_text())
    f = wiring_checks(KIMI, sgl_draft([2, 30, 58]), argv, "0.5.23")
    assert codes(f) == ["aux.algorithm"]
    assert f[0].evidence["fc_expects"] == 21504 and f[0].evidence["state_fed"] == 7168


def test_top_level_ids_ignored():
    d = sgl_draft(None, eagle_aux_hidden_state_layer_ids=[3, 29, 50])
    f = wiring_checks(KIMI, d, EAGLE3, "0.5.23")
    assert codes(f) == ["aux.layer_ids_ignored"] and f[0].severity == "error"
    # [1, 29, 57]: points [1, 29, 57] as speculators ids, [2, 30, 58] (SGLang's default) as copied output-convention ids
    d1 = sgl_draft(None, eagle_aux_hidden_state_layer_ids=[1, 29, 57])
    f1 = wiring_checks(KIMI, d1, EAGLE3, "0.5.23")
    assert codes(f1) == ["aux.layer_ids_ignored"] and f1[0].severity == "warning"
    assert f1[0].evidence["points_if_copied_by_speculators_convert"] == [2, 30, 58]
    d2 = sgl_draft(None, eagle_aux_hidden_state_layer_ids=[2, 30, 58])  # equals SGLang's default
    f2 = wiring_checks(KIMI, d2, EAGLE3, "0.5.23")
    assert codes(f2) == ["aux.layer_ids_ignored"] and f2[0].severity == "info" and "harmless" in f2[0].title


def test_ignored_ids_graded_by_the_points_they_mean_on_a_plus1_target():
    """A 30-layer Llama target: without eagle_config ids SGLang captures its default points [2, 15, 27]. Top-level
    ids are converted before the comparison: [2, 15, 27] as speculators ids (point = id) are those points (info);
    [1, 14, 26] are those points as the output-convention ids `speculators convert` copies (a warning, not an
    error: SGLang serves such a draft as trained); [5, 14, 20] are neither (error)."""
    top = sgl_draft(None, H=576, eagle_aux_hidden_state_layer_ids=[2, 15, 27])
    nested = sgl_draft([2, 15, 27], H=576)
    f = wiring_checks(LLAMA_T, top, EAGLE3, "0.5.23")
    assert [(x.code, x.severity) for x in f] == [("aux.layer_ids_ignored", "info")]
    assert not [x for x in wiring_checks(LLAMA_T, nested, EAGLE3, "0.5.23") if x.severity != "info"]
    copied = wiring_checks(
        LLAMA_T, sgl_draft(None, H=576, eagle_aux_hidden_state_layer_ids=[1, 14, 26]), EAGLE3, "0.5.23"
    )
    assert [(x.code, x.severity) for x in copied] == [("aux.layer_ids_ignored", "warning")]
    off = wiring_checks(LLAMA_T, sgl_draft(None, H=576, eagle_aux_hidden_state_layer_ids=[5, 14, 20]), EAGLE3, "0.5.23")
    assert [(x.code, x.severity) for x in off] == [("aux.layer_ids_ignored", "error")]


def test_ignored_ids_equal_to_sglang_default_ids_are_not_its_default_points_when_the_default_gets_plus1():
    """MiniMaxM3 VL adds 1 to its default too (points [3, 16, 28] on 30 layers): top-level ids [2, 15, 27] equal
    SGLang's default *ids*, but as speculators ids they mean points [2, 15, 27], so they are no longer taken as
    harmless (they match only as copied output-convention ids: a warning)."""
    minimax = {
        "architectures": ["MiniMaxM3SparseForConditionalGeneration"],
        "num_hidden_layers": 30,
        "hidden_size": 576,
    }
    d = sgl_draft(None, H=576, eagle_aux_hidden_state_layer_ids=[2, 15, 27])
    [ign] = [x for x in wiring_checks(minimax, d, EAGLE3, "0.5.23") if x.code == "aux.layer_ids_ignored"]
    assert ign.severity == "warning" and ign.evidence["sglang_default_points"] == [3, 16, 28]
    assert ign.evidence["points_meant_by_ids"] == [2, 15, 27]


def test_layer_shift_from_trained_with_and_fix():
    f = wiring_checks(LLAMA_T, sgl_draft([2, 15, 27], H=576), EAGLE3, "0.5.23", trained_with="speculators")
    assert codes(f) == ["aux.layer_shift"]
    assert f[0].evidence["serving_points"] == [3, 16, 28] and "[1, 14, 26]" in f[0].fix
    assert not wiring_checks(LLAMA_T, sgl_draft([1, 14, 26], H=576), EAGLE3, "0.5.23", trained_with="specforge")


def test_layer_shift_unrepresentable_on_kimi_0_5_23():
    f = wiring_checks(KIMI, sgl_draft([1, 29, 57]), EAGLE3, "0.5.23", trained_with="speculators")
    assert codes(f) == ["aux.layer_shift"] and "cannot be expressed" in f[0].fix


def test_layer_shift_from_provenance(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(sgl_draft([2, 15, 27], H=576)))
    (tmp_path / "kit_provenance.json").write_text(
        json.dumps(
            {
                "source_layout": "speculators",
                "source_aux_layer_id_convention": "speculators",
                "aux_layer_ids": [2, 15, 27],
            }
        )
    )
    f = wiring_checks(LLAMA_T, sgl_draft([2, 15, 27], H=576), EAGLE3, "0.5.23", draft_dir=tmp_path)
    assert codes(f) == ["aux.layer_shift"] and f[0].evidence["training_points"] == [2, 15, 27]


def test_widths_and_target_capture():
    f = wiring_checks(LLAMA_T, sgl_draft([1, 14], H=576, num_aux_hidden_states=3), EAGLE3, "0.5.23")
    assert "aux.fc_width" in codes(f)
    f = wiring_checks(LLAMA_T, sgl_draft([1, 14, 26], H=576, target_hidden_size=1024), EAGLE3, "0.5.23")
    assert "aux.hidden_width" in codes(f)
    f = wiring_checks(LLAMA_T, sgl_draft([1, 14, 26], H=1728, target_hidden_size=576), EAGLE3, "0.5.23")
    assert [x.severity for x in f if x.code == "aux.fc_width"] == ["warning"]
    mixtral = {"architectures": ["MixtralForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096}
    f = wiring_checks(mixtral, sgl_draft([1, 15, 28], H=4096), EAGLE3, "0.5.23")
    assert codes(f) == ["aux.target_capture"]
    f = wiring_checks(LLAMA_T, sgl_draft([1, 14, 29], H=576), EAGLE3, "0.5.23")  # p = 30 = L on llama
    assert codes(f) == ["aux.target_capture"]


def test_fc_width_from_safetensors_header(tmp_path):
    import torch

    from kit.checkpoint.safetensors_io import write_safetensors

    write_safetensors(tmp_path / "model.safetensors", {"fc.weight": torch.zeros(576, 1152)})
    f = wiring_checks(LLAMA_T, sgl_draft([1, 14, 26], H=576), EAGLE3, "0.5.23", draft_dir=tmp_path)
    assert codes(f) == ["aux.fc_width"] and f[0].evidence["fc_in_features"] == 1152


def test_wiring_from_launch():
    w = wiring_from_launch(["--speculative-algorithm", "NEXTN"], sgl_draft([1, 29, 57]), KIMI, "0.5.23")
    assert (w.algorithm, w.aux_capture, w.capture_points) == ("EAGLE", False, None)
    w = wiring_from_launch(EAGLE3, sgl_draft([1, 29, 57]), KIMI, "0.5.23")
    assert (w.aux_capture, w.capture_points) == (True, (2, 30, 58))
    off = sgl_draft(None, eagle_config={"use_aux_hidden_state": False, "eagle_aux_hidden_state_layer_ids": [1, 29, 57]})
    w = wiring_from_launch(EAGLE3, off, KIMI)
    assert not w.aux_capture


def test_doctor_cli_on_kimi_config(tmp_path, capsys, monkeypatch):
    """Through `kit doctor` (other providers switched off: they have their own tests)."""
    from kit import doctor
    from kit.cli import main

    assert "kit.wiring.checks" in doctor.PROVIDERS
    monkeypatch.setattr(doctor, "PROVIDERS", ["kit.wiring.checks"])
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text(json.dumps(sgl_draft([2, 30, 58])))
    rc = main(
        [
            "doctor",
            "--target",
            str(KIMI_PATH),
            "--draft",
            str(tmp_path / "draft"),
            "--launch-file",
            str(DATA / "seed_launch.sh"),
            "--sglang-version",
            "0.5.23",
            "--no-probe-env",
            "--json",
        ]
    )
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 1 and "aux.algorithm" in {f["code"] for f in doc["findings"]}


def test_no_torch_import_for_static_checks():
    import subprocess

    code = (
        "import sys, json; from kit.wiring.checks import wiring_checks; "
        "wiring_checks({'architectures':['LlamaForCausalLM'],'num_hidden_layers':30,'hidden_size':576},"
        "{'architectures':['LlamaForCausalLMEagle3'],'hidden_size':576}, ['--speculative-algorithm','EAGLE']); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- a target whose forward never sees the layers its setter writes (bare tensor where (hidden, aux) unpacks) --
def test_scan_names_an_inherited_setter_whose_model_reads_only_its_own_marks():
    """A class inheriting LlamaForCausalLM's setter (writes self.model.layers_to_capture) that builds a
    Qwen2MoeModel (captures only layers marked _is_layer_to_capture): real 0.5.17 source plus that subclass."""
    from kit.derive.capture_scan import scan_models
    from kit.findings import KitInputError
    from kit.sglang.source import source_files

    try:
        files = source_files("0.5.17", "srt/models", download=False)
    except (KitInputError, FileNotFoundError) as e:
        pytest.skip(f"sglang 0.5.17 source not cached: {e}")
    files = {k: v for k, v in files.items() if k.endswith(("/llama.py", "/qwen2_moe.py"))}
    files["srt/models/foo.py"] = (
        "from sglang.srt.models.llama import LlamaForCausalLM\n"
        "from sglang.srt.models.qwen2_moe import Qwen2MoeModel\n\n"
        "class FooForCausalLM(LlamaForCausalLM):\n"
        "    def __init__(self, config, quant_config=None, prefix=''):\n"
        "        super().__init__(config, quant_config, prefix)\n"
        "        self.model = Qwen2MoeModel(config, quant_config)\n\n"
        "EntryClass = [FooForCausalLM]\n"
    )
    rows = scan_models(files)
    assert rows["FooForCausalLM"]["bare_forward"] == {
        "writes": "model.layers_to_capture",
        "model_class": "Qwen2MoeModel",
        "forward_of": "Qwen2MoeModel",
        "reads": "_is_layer_to_capture",
    }
    assert "bare_forward" not in rows["LlamaForCausalLM"] and "bare_forward" not in rows["Qwen2MoeForCausalLM"]


def test_doctor_names_the_bare_forward_crash_of_minimax_m3_in_0_5_17():
    """Real 0.5.17: MiniMaxM3SparseForCausalLM's setter writes model.layers_to_capture, MiniMaxM3Model's forward
    reads only _is_layer_to_capture marks: startup crash. The recorded table says so for 0.5.17 and not later."""
    from kit.sglang.capture import capture_rule

    rule = capture_rule("MiniMaxM3SparseForCausalLM", "0.5.17")
    assert rule["bare_forward"]["model_class"] == "MiniMaxM3Model"
    assert "bare_forward" not in capture_rule("MiniMaxM3SparseForCausalLM", "0.5.18")
    target = {"architectures": ["MiniMaxM3SparseForCausalLM"], "num_hidden_layers": 62, "hidden_size": 3072}
    f = wiring_checks(target, sgl_draft(None, H=3072), EAGLE3, "0.5.17")
    assert [(x.code, x.severity) for x in f] == [("aux.target_capture", "error")]
    assert "bare tensor" in f[0].title and "MiniMaxM3Model" in f[0].title
    assert not wiring_checks(target, sgl_draft(None, H=3072), EAGLE3, "0.5.18")


_SETTER = (
    "class Base:\n"
    "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
    "        self.capture_aux_hidden_states = True\n"
    "        self.model.capture_aux_hidden_states = True\n"
    "        if layer_ids is None:\n"
    "            n = self.config.num_hidden_layers\n"
    "            self.model.layers_to_capture = [2, n // 2, n - 3]\n"
    "        else:\n"
    "            self.model.layers_to_capture = [v + 1 for v in layer_ids]\n\n"
)
_FORWARD = (
    "    def forward(self, input_ids, positions, forward_batch):\n"
    "        hidden_states = self.model(input_ids, positions, forward_batch)\n"
    "        aux_hidden_states = None\n"
    "        if self.capture_aux_hidden_states:\n"
    "            hidden_states, aux_hidden_states = hidden_states\n"
    "        return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch{})\n\n"
)


def test_scan_names_a_forward_that_drops_the_captured_states():
    """A forward that unpacks (hidden, aux) but calls the logits processor without aux (the shape of
    Qwen2_5_VLForConditionalGeneration.forward in 0.5.5.post3) is recorded as aux_dropped; passing aux, positionally
    or by keyword, is not."""
    from kit.derive.capture_scan import scan_models

    src = (
        _SETTER
        + "class DropsForConditionalGeneration(Base):\n"
        + _FORWARD.format("")
        + "class KeepsForConditionalGeneration(Base):\n"
        + _FORWARD.format(", aux_hidden_states")
        + "class KeywordForConditionalGeneration(Base):\n"
        + _FORWARD.format(", aux_hidden_states=aux_hidden_states")
        + "EntryClass = [DropsForConditionalGeneration, KeepsForConditionalGeneration, KeywordForConditionalGeneration]\n"
    )
    rows = scan_models({"srt/models/vl.py": src})
    assert rows["DropsForConditionalGeneration"]["aux_dropped"] == {
        "forward_of": "DropsForConditionalGeneration",
        "unpacks": "aux_hidden_states",
        "not_passed_to": "self.logits_processor",
    }
    assert "aux_dropped" not in rows["KeepsForConditionalGeneration"]
    assert "aux_dropped" not in rows["KeywordForConditionalGeneration"]


def test_scan_follows_the_language_model_cls_default_to_the_forward_that_runs():
    """A VL wrapper whose base's __init__ builds `self.model = language_model_cls(...)`: the decoder model is the
    class the most derived __init__ defaults that parameter to (Qwen3.5 over Qwen3-VL, 0.5.11-0.5.21)."""
    from kit.derive.capture_scan import scan_models

    src = (
        _SETTER + "class ListModel:\n"
        "    def forward(self, x):\n"
        "        aux = []\n"
        "        for i, layer in enumerate(self.layers):\n"
        "            if i in self.layers_to_capture:\n"
        "                aux.append(x)\n"
        "        return x, aux\n\n"
        "class MarkModel:\n"
        "    def forward(self, x):\n"
        "        aux = []\n"
        "        for layer in self.layers:\n"
        "            x = layer(x, captured=aux if getattr(layer, '_is_layer_to_capture', False) else None)\n"
        "        return (x, aux) if aux else x\n\n"
        "class WrapForConditionalGeneration(Base):\n"
        "    def __init__(self, config, quant_config=None, prefix='', language_model_cls=ListModel):\n"
        "        self.model = language_model_cls(config=config)\n\n"
        + _FORWARD.format(", aux_hidden_states")
        + "class NewWrapForConditionalGeneration(WrapForConditionalGeneration):\n"
        "    def __init__(self, config, quant_config=None, prefix='', language_model_cls=MarkModel):\n"
        "        super().__init__(config, quant_config, prefix, language_model_cls)\n\n"
        "EntryClass = [WrapForConditionalGeneration, NewWrapForConditionalGeneration]\n"
    )
    rows = scan_models({"srt/models/vl.py": src})
    assert rows["NewWrapForConditionalGeneration"]["bare_forward"]["model_class"] == "MarkModel"
    assert "bare_forward" not in rows["WrapForConditionalGeneration"]


QWEN25_VL_7B = {  # Qwen/Qwen2.5-VL-7B-Instruct config.json (the text part the kit reads)
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 128000,
    "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
}


def test_doctor_names_the_vl_wrapper_that_drops_aux_states_in_0_5_5_post3():
    """Real 0.5.5.post3 (recorded table): Qwen2_5_VLForConditionalGeneration captures the aux states and calls the
    logits processor without them (SpecForge issue 310); 0.5.5 and 0.5.6 (sglang PR 13904) pass them."""
    from kit.sglang.capture import capture_rule

    assert capture_rule("Qwen2_5_VLForConditionalGeneration", "0.5.5.post3")["aux_dropped"]["unpacks"] == (
        "aux_hidden_states"
    )
    for ok in ("0.5.4", "0.5.5", "0.5.6"):
        assert "aux_dropped" not in capture_rule("Qwen2_5_VLForConditionalGeneration", ok)
    draft = sgl_draft(None, H=3584)
    f = wiring_checks(QWEN25_VL_7B, draft, EAGLE3, "0.5.5.post3")
    assert [(x.code, x.severity) for x in f] == [("aux.target_capture", "error")]
    assert "drops them" in f[0].title and "0.5.5.post3" in f[0].title
    assert not wiring_checks(QWEN25_VL_7B, draft, EAGLE3, "0.5.6")


def test_doctor_names_qwen3_5_whose_forward_never_collects_aux_states_in_0_5_17():
    """Real 0.5.17 (recorded table): Qwen3_5ForConditionalGeneration inherits Qwen3-VL's setter, which writes
    model.layers_to_capture, while its decoder model (Qwen3_5ForCausalLM, the language_model_cls default) captures
    only layers marked _is_layer_to_capture (0.5.11-0.5.21); 0.5.22 on marks them (sglang PR 25408)."""
    from kit.sglang.capture import capture_rule

    for arch in ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"):
        assert capture_rule(arch, "0.5.17")["bare_forward"]["forward_of"] == "Qwen3_5ForCausalLM"
        assert "bare_forward" not in capture_rule(arch, "0.5.23")
