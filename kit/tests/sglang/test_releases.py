"""Every listed SGLang release has every rule table; no other release's row stands in for it."""

import json

import pytest

from kit.sglang import capture, flags, loader, quant, releases
from kit.sglang.versions import Version, dedupe_rows, stored_rows


def test_list_is_every_final_and_post_release_from_0_4_4():
    vs = releases.listed()
    assert vs[0] == releases.FIRST_RELEASE == "0.4.4"
    assert vs == sorted(vs, key=Version.parse) and len(set(vs)) == len(vs)
    assert all(Version.parse(v) >= Version.parse("0.4.4") for v in vs)
    assert not [v for v in vs if any(p in v for p in ("rc", "dev", "a", "b"))]
    assert {"0.4.4.post1", "0.5.5.post3", "0.5.17"} <= set(vs)


@pytest.mark.parametrize("version", releases.listed())
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
    note = releases.unlisted_note(newer)
    assert note and releases.derive_command(newer) in note
    assert releases.unlisted_note(newer) is None  # once
    assert releases.unlisted_note(releases.listed()[-1]) is None


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
