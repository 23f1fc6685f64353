"""Every listed SGLang release has every rule table; no other release's row stands in for it."""

import json
from pathlib import Path

import pytest

from kit.derive import dedupe_rows
from kit.findings import KitInputError
from kit.sglang import capture, env_vars, flags, loader, quant, releases, versions
from kit.sglang.versions import Version, stored_rows
from kit.tests.sglang import source_or_skip


def test_list_is_every_final_and_post_release_from_0_4_4():
    vs = versions.listed()
    assert vs[0] == versions.FIRST_RELEASE == "0.4.4"
    assert vs == sorted(vs, key=Version.parse) and len(set(vs)) == len(vs)
    assert all(Version.parse(v) >= Version.parse("0.4.4") for v in vs)
    assert not [v for v in vs if any(p in v for p in ("rc", "dev", "a", "b"))]
    assert {"0.4.4.post1", "0.5.5.post3", "0.5.17"} <= set(vs)


@pytest.mark.parametrize("version", versions.listed())
def test_listed_release_has_every_table(version):
    assert releases.missing(version) == []
    assert capture.recorded_release(version).exact and quant.recorded_release(version).exact
    assert loader.rules_for(version).exact
    if flags.missing_reason(version) is None:
        assert flags.table_for(version).exact
    else:  # its parser could not be read from the wheel: the reason is recorded, no table stands in
        assert version not in flags.known_versions() and flags.missing_reason(version).strip()


def test_newer_release_warned_once_with_the_derive_command():
    newer = "99.0.0"
    note = versions.unlisted_note(newer)
    assert note and versions.derive_command(newer) in note
    assert versions.unlisted_note(newer) is None  # once
    assert versions.unlisted_note(versions.listed()[-1]) is None


def test_same_as_rows_resolve_to_the_row_they_repeat():
    rows = {"0.5.4": {"a": 1}, "0.5.4.post1": {"a": 1}, "0.5.5": {"a": 2}}
    stored = dedupe_rows(rows)
    assert stored["0.5.4.post1"] == {"same_as": "0.5.4"} and stored["0.5.5"] == {"a": 2}
    assert stored_rows(stored, "none-such-table") == rows


def test_stored_tables_are_deduplicated():
    for path in (capture.TABLE_PATH, loader.TABLE_PATH, quant.TABLE_PATH, flags.TABLE_PATH):
        rows = json.loads(path.read_text())["versions"]
        plain = [json.dumps(r, sort_keys=True) for r in rows.values() if "same_as" not in r]
        assert len(plain) == len(set(plain)), path.name


def test_listed_release_without_a_flag_table_says_why_and_borrows_nothing(monkeypatch):
    """A listed release whose parser could not be read from its wheel (every listed release has a table today, so
    one row is replaced by a recorded reason): doctor's launch check names the reason and judges no flag by
    another release's table."""
    from kit.sglang.parser import flag_findings

    v, why = "0.4.4.post1", "its parser could not be imported from the wheel source: (a recorded reason)"
    stored = {**flags._stored(), v: {"missing": why}}
    monkeypatch.setattr(flags, "_stored", lambda: stored)
    assert flags.missing_reason(v) == why and v in versions.listed()
    monkeypatch.setenv("KIT_NO_VENV_BUILD", "1")
    monkeypatch.delenv("KIT_SGLANG_PYTHON", raising=False)
    found = flag_findings(["--speculative-draft", "d", "--no-such-flag"], version=v)
    assert [f.code for f in found] == ["launch.parser"]
    assert found[0].title.startswith(f"flags not checked for SGLang {v}: ") and why in found[0].title


def test_every_listed_release_has_its_own_flag_table():
    assert [v for v in versions.listed() if flags.missing_reason(v) or not flags.has_row(v)] == []


def test_cli_warns_once_for_a_newer_release(capsys):
    import argparse

    from kit.cli import _check_release

    versions._WARNED.discard("98.1")
    _check_release("doctor", argparse.Namespace(sglang_version="98.1"))
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "python -m kit.sglang.releases --derive 98.1" in err
    _check_release("doctor", argparse.Namespace(sglang_version="0.5.5.post3"))  # listed: exact, silent
    assert capsys.readouterr().err == ""


def test_flag_table_read_from_the_wheel_source_is_the_stored_one():
    """The newest release's parser, read from its wheel source in this interpreter (what `--derive V` does), gives
    the stored table: same actions, same entry points."""
    from kit.derive.flag_scan import derive_from_source
    from kit.findings import KitInputError

    v = versions.listed()[-1]
    try:
        doc = derive_from_source(v)
    except KitInputError as e:
        pytest.skip(f"sglang {v} not readable here: {e}")
    t = flags.table_for(v)
    assert t.exact and list(t.actions) == doc["actions"] and t.entry == doc["entry"]


def _clear_table_caches():
    for fn in (flags._stored, flags.table_for, flags._parser, capture.table, quant.table, loader._table):
        fn.cache_clear()
    env_vars.release_vars.cache_clear()


def test_tables_derived_here_answer_for_their_release(tmp_path, monkeypatch):
    """Rows `--derive V` writes under $KIT_CACHE_DIR/sglang-tables/V/ are V's own: every table answers exactly
    for V, and the newer-release warning is not given again."""
    newest = versions.listed()[-1]
    v = "97.0.1"
    out = tmp_path / "sglang-tables" / v
    out.mkdir(parents=True)
    t = flags.table_for(newest)
    rows = {
        "flags": {"actions": list(t.actions), "entry": t.entry, "positionals": ["model_path"]},
        "capture": capture.table()["versions"][newest],
        "quant": quant.table()["versions"][newest],
        "loader": {
            **{k: loader._table()["versions"][newest][k] for k in ("classes", "runtime")},
            "registered": sorted(loader.registered_architectures(newest)),
        },
        "env_vars": env_vars.recorded_vars(newest),
    }
    for name, row in rows.items():
        (out / f"{name}.json").write_text(json.dumps(row))
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    _clear_table_caches()
    try:
        assert flags.table_for(v).exact and loader.rules_for(v).exact
        assert capture.recorded_release(v).exact and quant.recorded_release(v).exact
        assert loader.registered_architectures(v) == loader.registered_architectures(newest)
        assert env_vars.release_vars(v) == env_vars.recorded_vars(newest)
        assert versions.unlisted_note(v) is None
    finally:
        monkeypatch.undo()
        _clear_table_caches()


def test_post_releases_are_judged_by_their_own_rows():
    """LlamaForCausalLMEagle3 is registered from 0.4.4.post2 on (its own wheel), not from 0.4.5: 0.4.4's row no
    longer answers for 0.4.4.post2-post4; and 0.5.5.post3's capture row is its own, not 0.5.5's."""
    assert "LlamaForCausalLMEagle3" not in loader.registered_architectures("0.4.4.post1")
    assert "LlamaForCausalLMEagle3" in loader.registered_architectures("0.4.4.post2")
    assert loader.rules_for("0.4.4.post2").features["has_eagle3"]
    assert capture.capture_rule("Qwen2_5_VLForConditionalGeneration", "0.5.5.post3")["version"] == "0.5.5.post3"


# -- `python -m kit.sglang.releases --add V`: the list without the index, every table rewritten byte for byte, and a
# second run (or a run for a recorded release) that changes nothing
KIT_SGLANG = Path(releases.__file__).parent


def test_the_list_takes_a_release_as_given_and_keeps_it_sorted():
    vs = ["0.4.4", "0.5.9", "0.5.10"]
    assert releases.with_release(vs, "0.5.9.post1") == ["0.4.4", "0.5.9", "0.5.9.post1", "0.5.10"]
    assert releases.with_release(vs, "0.6.0") == [*vs, "0.6.0"]
    assert releases.with_release(vs, "0.5.10") == vs  # listed: unchanged
    for bad in ("0.5.11rc0", "0.4.3", "latest"):
        with pytest.raises(KitInputError):
            releases.with_release(vs, bad)


def test_the_list_file_is_rewritten_only_when_it_changes(tmp_path, monkeypatch):
    path = tmp_path / "releases.json"
    path.write_text(releases.RELEASES_PATH.read_text())
    monkeypatch.setattr(releases, "RELEASES_PATH", path)
    vs = releases.listed()
    assert releases.write_list(vs) is False and path.read_text() == releases.RELEASES_PATH.read_text()
    new = releases.with_release(vs, "99.0")
    assert releases.write_list(new) is True and json.loads(path.read_text())["releases"] == new
    assert releases.write_list(new) is False


@pytest.mark.parametrize("table", releases.ADD_ORDER)
def test_each_table_is_rewritten_byte_for_byte_from_its_rows(table, tmp_path):
    """A scanner's `add_rows` keeps every stored row: with nothing to add the file is left alone, and the table
    rebuilt from its rows alone is the stored file (adding V's row changes V's row only)."""
    scan = releases._scanners()[table][0]
    mod = {"loader": loader, "flags": flags, "capture": capture, "quant": quant, "env_vars": env_vars}[table]
    stored = mod.TABLE_PATH
    copy = tmp_path / stored.name
    copy.write_text(stored.read_text())
    assert scan.add_rows({}, copy) is False
    copy.write_text('{"releases": [], "vars": {}}' if table == "env_vars" else '{"versions": {}}')
    scan.add_rows(scan.stored(stored), copy)
    assert copy.read_bytes() == stored.read_bytes()


def test_add_on_a_recorded_release_changes_nothing(capsys):
    v = "0.5.23"
    source_or_skip(v)
    before = {p.name: p.read_bytes() for p in KIT_SGLANG.glob("*.json")}
    try:
        for _ in range(2):
            assert releases.main(["--add", v]) == 0
            out = capsys.readouterr().out
            assert {p.name: p.read_bytes() for p in KIT_SGLANG.glob("*.json")} == before
            assert "every table already has its row" in out and out.count(releases.SAME) == 4
            assert "kit/sglang/http_api.json" in out and "python -m pytest" in out.splitlines()[-1]
    finally:
        for name, data in before.items():
            if (KIT_SGLANG / name).read_bytes() != data:
                (KIT_SGLANG / name).write_bytes(data)
