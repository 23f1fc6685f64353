"""Findings, reports and their three renderings. Run: python -m pytest kit/tests/test_findings.py"""

import json

import pytest

from kit.findings import EXIT_ERRORS, EXIT_OK, Finding, Report


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
    assert "fix: do c" in text and "1 error(s)" in text
    html = _report()._repr_html_()
    assert "<table" in html and "fc.weight" in html
    assert list(_report().to_frame().columns) == ["severity", "code", "title", "evidence", "fix"]
