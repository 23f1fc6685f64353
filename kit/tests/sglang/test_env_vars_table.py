"""The SGLANG_* variables each release reads (kit/sglang/env_vars.json): equal to its wheel's own, and answered
from the table on a host with no SGLang source at hand.

    python -m pytest kit/tests/sglang/test_env_vars_table.py -q
"""

import pytest

from kit.derive import env_vars_scan
from kit.sglang import env_vars
from kit.sglang.versions import listed
from kit.tests.sglang import derive_or_skip

# the first release, the one the kit bundles, the newest, and the releases around environ.py's arrival
CHECKED = ("0.4.4", "0.5.4", "0.5.8", "0.5.17", "0.5.23")


@pytest.mark.parametrize("version", CHECKED)
def test_table_matches_the_release_source(version):
    derived = derive_or_skip(lambda v: env_vars.derive(v, download=False), version)
    assert env_vars.recorded_vars(version) == derived, f"sglang {version} changed: re-run --write"


def test_every_listed_release_is_in_the_table():
    assert env_vars.known_versions() == listed()


def test_a_host_without_the_source_judges_from_the_table(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("kit.sglang.versions.importable_version", lambda: None)
    env_vars.release_vars.cache_clear()
    try:
        new, old = env_vars.release_vars("0.5.23"), env_vars.release_vars("0.4.4")
        assert len(old) < len(new) and env_vars.release_vars("0.5.17")["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"]
        later = sorted(set(new) - set(old))[0]
        found = {f.evidence["var"]: f for f in env_vars.sglang_findings({later: "1"}, "0.4.4")}
        assert found[later].severity == "warning" and "not read anywhere in SGLang 0.4.4" in found[later].title
        assert env_vars.sglang_findings({later: "1"}, "0.5.23")[0].severity == "info"
        assert env_vars.release_vars("97.0.3") is None  # not listed, not derived here, no source: explain only
    finally:
        env_vars.release_vars.cache_clear()


def test_a_variable_dropped_and_brought_back_keeps_both_spans():
    rows = {"1.0": {"SGLANG_A": "EnvBool"}, "1.1": {}, "1.2": {"SGLANG_A": "EnvBool"}, "1.3": {"SGLANG_A": "EnvInt"}}
    t = env_vars_scan.spans_table(rows)
    assert t["vars"]["SGLANG_A"] == [["EnvBool", "1.0", "1.0"], ["EnvBool", "1.2", "1.2"], ["EnvInt", "1.3", "1.3"]]
