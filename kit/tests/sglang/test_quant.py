"""kit.sglang.quant: each release's own `_parse_quant_hf_config` run on ModelOpt probe files, and `draft.quant`.

The realistic case: a BF16 EAGLE-3 head exported by NVIDIA ModelOpt with only an FP8 KV cache writes
`hf_quant_config.json` with `"quant_algo": null`; releases that read any such file as `modelopt` build
`ModelOptFp8Config` for the draft.

    python -m pytest kit/tests/sglang/test_quant.py -q
"""

from __future__ import annotations

import json

import pytest

from kit.sglang.quant import PROBES, derive, draft_quantization, misread_releases, table

MODELOPT_KV_ONLY = {
    "producer": {"name": "modelopt", "version": "0.29.0"},
    "quantization": {"quant_algo": None, "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]},
}


def _source_or_skip(version):
    from kit.findings import KitInputError
    from kit.sglang.source import source_root

    try:
        source_root(version, download=False)
    except KitInputError as e:
        pytest.skip(f"sglang {version} source not cached: {e}")


@pytest.mark.parametrize("version", ["0.4.10", "0.5.17"])
def test_recorded_table_matches_the_real_source(version):
    _source_or_skip(version)
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


def test_doctor_names_a_draft_set_up_quantized_by_an_older_release(tmp_path):
    from kit.checkpoint.inspect import inspect

    d = _draft_dir(tmp_path, MODELOPT_KV_ONLY)
    old = [f for f in inspect(d, "0.4.10").report.findings if f.code == "draft.quant"]
    assert [f.severity for f in old] == ["error"] and "ModelOptFp8Config" in old[0].title
    new = [f for f in inspect(d, "0.5.17").report.findings if f.code == "draft.quant"]
    assert [f.severity for f in new] == ["info"] and "unquantized" in new[0].title
