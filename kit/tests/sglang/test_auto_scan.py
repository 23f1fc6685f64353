"""What SGLang auto-chooses for steps/topk/draft tokens, per release: the recorded rule against the real function.

`kit.sglang.params.AUTO_RULES` against `_auto_choose_speculative_params` of each release, read from its
source by `kit.derive.auto_scan` (wheels downloaded once, cached; skipped offline).
Run: python -m pytest kit/tests/sglang/test_auto_scan.py -q
"""

import pytest

from kit.derive.auto_scan import read_chain
from kit.sglang.params import AUTO_RULES, SpecParams, auto_params, resolve
from kit.tests.sglang import derive_or_skip

# each release where the rule changed, one between, and the default release
RELEASES = ["0.4.5", "0.4.6.post5", "0.4.7", "0.5.1", "0.5.2", "0.5.3", "0.5.4", "0.5.8", "0.5.23"]


def _derive_or_skip(version):
    from kit.derive.auto_scan import derive

    return derive_or_skip(derive, version)


@pytest.mark.parametrize("version", RELEASES)
def test_recorded_rule_matches_the_real_function(version):
    d = _derive_or_skip(version)
    assert d["file"] and d["default"] and d["branches"]
    for classes, triple in d["branches"]:
        for arch in classes:
            assert auto_params("EAGLE3", arch, version).given() == SpecParams(*triple).given(), (version, arch)
    assert auto_params("EAGLE3", "NoSuchForCausalLM", version) == SpecParams(*d["default"])
    standalone = d["standalone"] or d["default"]  # no STANDALONE branch: it goes down the chain
    assert auto_params("STANDALONE", "NoSuchForCausalLM", version) == SpecParams(*standalone)


def test_the_rule_changed_and_the_finding_says_which():
    assert set(AUTO_RULES) >= {"0.4.7", "0.5.8"}
    assert auto_params("EAGLE3", "Qwen2ForCausalLM", "0.5.7").label() == "5-4-8"
    assert auto_params("EAGLE3", "Qwen2ForCausalLM", "0.5.8").label() == "3-1-4"
    res = resolve(SpecParams(), "EAGLE3", "Qwen2ForCausalLM", sglang_version="0.5.4")
    assert res.auto and res.params.label() == "5-4-8" and "5-4-8" in res.issues[0].title


def test_read_chain_reads_the_if_elif_chain():
    text = """
def _auto_choose_speculative_params(server_args, model_arch):
    if server_args.speculative_algorithm == "STANDALONE":
        return (3, 1, 4)
    if model_arch in ["A"]:
        return (5, 4, 8)
    elif model_arch in ["B", "C"]:
        return (3, 1, 4)
    else:
        return (2, 1, 3)
"""
    assert read_chain(text) == {
        "standalone": (3, 1, 4),
        "branches": [[["A"], (5, 4, 8)], [["B", "C"], (3, 1, 4)]],
        "default": (2, 1, 3),
    }
    assert read_chain("def other(): pass") is None
