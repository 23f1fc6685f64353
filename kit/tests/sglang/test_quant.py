"""kit.sglang.quant: each release's own `_parse_quant_hf_config` run on ModelOpt probe files (kit.derive.quant_scan),
and `draft.quant`.

The realistic case: a BF16 EAGLE-3 head exported by NVIDIA ModelOpt with only an FP8 KV cache writes
`hf_quant_config.json` with `"quant_algo": null`; releases that read any such file as `modelopt` build
`ModelOptFp8Config` for the draft.

    python -m pytest kit/tests/sglang/test_quant.py -q
"""

from __future__ import annotations

import json

import pytest

from kit.derive.quant_scan import PROBES, derive, scan_no_algo_loader
from kit.sglang.quant import LOADER_SRC, NO_ALGO_LOADER, draft_quantization, misread_releases, table
from kit.tests.sglang import source_or_skip

MODELOPT_KV_ONLY = {
    "producer": {"name": "modelopt", "version": "0.29.0"},
    "quantization": {"quant_algo": None, "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]},
}


@pytest.mark.parametrize("version", ["0.4.10", "0.5.17"])
def test_recorded_table_matches_the_real_source(version):
    source_or_skip(version)
    assert derive(version, download=False) == table()["versions"][version]


def test_old_releases_read_a_modelopt_file_without_algorithm_as_fp8_and_new_ones_do_not():
    bad = misread_releases()
    assert "0.4.10" in bad and "0.5.17" not in bad and "0.5.23" not in bad
    assert draft_quantization("0.4.10", MODELOPT_KV_ONLY)["class"] == "ModelOptFp8Config"
    assert draft_quantization("0.5.17", MODELOPT_KV_ONLY)["quant_method"] is None
    assert draft_quantization("0.5.17", PROBES["fp8"])["class"] == "ModelOptFp8Config"


def _draft_dir(tmp_path, hf_quant):
    from kit.checkpoint.random_draft import write_random_draft

    d = tmp_path / "draft"
    write_random_draft(d, layout="sglang", draft_vocab_size=64)
    (d / "hf_quant_config.json").write_text(json.dumps(hf_quant))
    return d


def test_doctor_follows_the_loader_past_the_parse(tmp_path):
    """0.4.10 parses a ModelOpt file without algorithm as modelopt, but its loader returns no quant config for a
    LlamaForCausalLMEagle3 head (the Llama-4 Maverick EAGLE-3 workaround): unquantized, no error. Another head
    class raises there; 0.4.8 has no such branch and fails at startup."""
    from kit.checkpoint.inspect import inspect

    d = _draft_dir(tmp_path, MODELOPT_KV_ONLY)

    def quant(version):
        return [f for f in inspect(d, version).report.findings if f.code == "draft.quant"]

    [kept] = quant("0.4.10")
    assert kept.severity == "info" and "unquantized" in kept.title and "get_quant_config" in kept.evidence["loader"]
    [crash] = quant("0.4.8")
    assert crash.severity == "error" and "TypeError" in crash.title
    [new] = quant("0.5.17")
    assert new.severity == "info" and "unquantized" in new.title
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(dict(cfg, architectures=["LlamaForCausalLM"])))
    [other] = quant("0.4.10")
    assert other.severity == "error" and "ValueError" in other.title


def test_loader_fact_matches_every_cached_release():
    """NO_ALGO_LOADER (class and first release) against each cached release's own get_quant_config."""
    import os

    from kit.sglang.source import source_text
    from kit.sglang.versions import Version

    root = source_or_skip("0.5.17").parent
    versions = [v for v in os.listdir(root) if v[0].isdigit() and (root / v / "sglang").is_dir()]
    if not {"0.4.8", "0.4.9"} <= set(versions):
        pytest.skip("the releases on both sides of the branch are not cached")
    since = Version.parse(NO_ALGO_LOADER["since"])
    for v in versions:
        want = NO_ALGO_LOADER["architecture"] if Version.parse(v) >= since else None
        assert scan_no_algo_loader(source_text(v, LOADER_SRC, download=False) or "") == want, v
