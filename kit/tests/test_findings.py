"""Findings, reports and their three renderings. Run: python -m pytest kit/tests/test_findings.py"""

import json

import pytest

from kit.findings import EXIT_ERRORS, EXIT_OK, Finding, Report, fill_placeholders


def _report():
    return Report(
        [
            Finding(code="x.warn", severity="warning", title="a warning", evidence={"file": "a.json"}, fix="do b"),
            Finding(code="x.err", severity="error", title="an error", evidence={"key": "fc.weight"}, fix="do c"),
        ]
    )


def test_severity_validated():
    with pytest.raises(ValueError):
        Finding(code="x", severity="fatal", title="t")
    with pytest.raises(ValueError):
        Finding(code="x", severity="info", title="two\nlines")


def test_exit_code_follows_errors():
    r = _report()
    assert r.exit_code() == EXIT_ERRORS
    assert Report(r.findings[:1]).exit_code() == EXIT_OK
    assert r.summary() == {"error": 1, "warning": 1, "info": 0, "total": 2, "ok": False}


def test_json_is_one_line_with_contract_keys():
    s = _report().to_json()
    assert "\n" not in s
    doc = json.loads(s)
    assert set(doc) >= {"findings", "summary"}
    assert set(doc["findings"][0]) == {"code", "severity", "title", "evidence", "fix"}


def test_text_lists_errors_first_and_html_table():
    text = _report().render_text(width=100)
    assert text.index("x.err") < text.index("x.warn")
    assert "fix: do c" in text and text.splitlines()[-1] == "1 error, 1 warning, 0 info"
    html = _report()._repr_html_()
    assert "<table" in html and "fc.weight" in html
    assert list(_report().to_frame().columns) == ["severity", "code", "title", "evidence", "fix"]


def _with_info(n: int = 3) -> Report:
    infos = [Finding(code=f"env.i{i}", severity="info", title=f"fact {i}") for i in range(n)]
    return Report(infos + _report().findings)


def test_info_folded_under_a_count_unless_verbose():
    text = _with_info().render_text(width=100, verbose=False)
    assert "env.i0" not in text.splitlines()[0] and "fact 0" not in text
    assert "+ 3 info findings not shown (env.i0, env.i1, env.i2); --verbose shows them" in text
    full = _with_info().render_text(width=100)
    assert "fact 0" in full and "not shown" not in full
    html = _with_info()._repr_html_()
    assert "<details>" in html and "fact 2" in html  # folded in the notebook too, one click away


def test_text_wraps_titles_to_the_width():
    long = Finding(code="x.long", severity="error", title="word " * 40, evidence={"k": "v " * 30}, fix="prose " * 20)
    lines = Report([long]).render_text(width=60).splitlines()
    assert all(len(x) <= 60 for x in lines), lines
    assert lines[0].startswith("ERROR x.long: word")


def test_fix_commands_get_the_users_paths_and_paste_as_they_are():
    f = Finding(
        code="draft.arch",
        severity="error",
        title="t",
        fix="python -m kit convert SRC DST --to sglang --sglang-version 0.5.23 (writes the class SGLang loads)",
    )
    (g,) = fill_placeholders([f], {"SRC": "/data/my draft", "DST": "/data/my draft-sglang", "PATH": None})
    assert g.fix.startswith("python -m kit convert '/data/my draft' '/data/my draft-sglang' --to sglang")
    lines = Report([g]).render_text(width=60).splitlines()
    cmd = [x.strip() for x in lines if not x.strip().startswith(("ERROR", "fix:", "#", "0 ", "1 "))]
    assert all(x.endswith(" \\") for x in cmd[:-1]) and not cmd[-1].endswith("\\")  # shell continuations
    assert any(x.strip() == "# writes the class SGLang loads" for x in lines)
    joined = " ".join(x.removesuffix(" \\") for x in cmd)
    assert joined == g.fix.removesuffix(" (writes the class SGLang loads)")


def test_emit_is_plain_when_piped(capsys):
    from kit.findings import emit

    assert emit(_with_info(), as_json=False, verbose=False) == EXIT_ERRORS
    out = capsys.readouterr().out
    assert "\x1b[" not in out and "ERROR x.err: an error" in out


def test_write_json_line_is_the_document_as_json_would_write_it(capsys):
    """`--json` output: one line, the same document json.dumps(default=str) gives, on a real and a replaced stdout."""
    import io
    import json
    from contextlib import redirect_stdout
    from pathlib import Path

    from kit.findings import write_json_line

    doc = {"tensors": [{"name": "w", "shape": (2, 3), "file": Path("/x/a.safetensors")}], "n": 1.5, "none": None}
    expect = json.loads(json.dumps(doc, default=str))
    write_json_line(doc)
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1 and json.loads(out) == expect
    text = io.StringIO()
    with redirect_stdout(text):
        write_json_line(doc)
    assert json.loads(text.getvalue()) == expect
