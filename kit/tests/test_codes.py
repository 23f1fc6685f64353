"""The registry of finding codes (`kit.codes`, `kit/codes.json`) is the one home of every code: each code a
module raises is registered with that module as an owner, each registered code is raised by exactly its owners,
and docs/findings.md is what the registry generates."""

import ast
import re
from pathlib import Path

import pytest

from kit import codes
from kit.findings import SEVERITIES, Finding

ROOT = Path(__file__).resolve().parents[2]
SEVERITY = re.compile(r"^(error|warning|info)( / (error|warning|info))*$")


def raised_codes() -> dict[str, set[str]]:
    """{code: modules whose source raises it as `code="..."`}, tests excluded."""
    out: dict[str, set[str]] = {}
    for p in (ROOT / "kit").rglob("*.py"):
        if "tests" in p.relative_to(ROOT / "kit").parts:
            continue
        mod = ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for c in set(re.findall(r'code\s*=\s*"([a-z_]+\.[a-z0-9_.]+)"', p.read_text())):
            out.setdefault(c, set()).add(mod)
    return out


def test_every_raised_code_is_registered():
    missing = set(raised_codes()) - set(codes.registry())
    assert not missing, f"codes raised in kit/ but not in kit/codes.json: {sorted(missing)}"


def test_no_stale_registered_codes():
    stale = set(codes.registry()) - set(raised_codes())
    assert not stale, f"codes in kit/codes.json raised nowhere in kit/: {sorted(stale)}"


def test_owners_are_the_raising_modules():
    raised = raised_codes()
    wrong = {c: (sorted(i.owners), sorted(raised.get(c, ()))) for c, i in codes.registry().items()}
    wrong = {c: v for c, v in wrong.items() if v[0] != v[1]}
    assert not wrong, f"owners (registered, raising): {wrong}"


def raised_severities() -> dict[str, set[tuple[str, str]]]:
    """{code: {(severity, "file:line")}} of each `code="..."` call in kit/ (tests excluded): its severity when
    written there, else every severity word its expression names (`"info" if ok else "error"`, a dict of them)."""
    out: dict[str, set[tuple[str, str]]] = {}
    for p in (ROOT / "kit").rglob("*.py"):
        if "tests" in p.relative_to(ROOT / "kit").parts:
            continue
        for n in ast.walk(ast.parse(p.read_text())):
            kw = {k.arg: k.value for k in getattr(n, "keywords", ()) if isinstance(n, ast.Call)}
            if isinstance(kw.get("code"), ast.Constant) and "severity" in kw:
                words = {c.value for c in ast.walk(kw["severity"]) if isinstance(c, ast.Constant)}
                for sev in words & set(SEVERITIES):
                    out.setdefault(kw["code"].value, set()).add((sev, f"{p.relative_to(ROOT)}:{n.lineno}"))
    return out


def test_no_code_is_raised_above_its_registered_severity():
    rank = SEVERITIES.index
    above = {
        c: sorted(w for s, w in sites if rank(s) < rank(codes.ceiling(c)))
        for c, sites in raised_severities().items()
        if codes.ceiling(c)
    }
    above = {c: w for c, w in above.items() if w}
    assert not above, f"raised above the kit/codes.json severity (its first word is the ceiling): {above}"


def test_a_finding_above_its_ceiling_is_refused():
    assert codes.ceiling("env.torch") == "error" and codes.ceiling("env.gpu") == "info"
    assert codes.ceiling("no.such") is None
    assert Finding(code="env.gpu", severity="info", title="1x H200").severity == "info"
    with pytest.raises(ValueError, match="env.gpu: severity 'warning' above 'info'"):
        Finding(code="env.gpu", severity="warning", title="1x H200")
    # a code the registry lacks (a test's, a toy engine's) has no ceiling
    assert Finding(code="toy.thing", severity="error", title="t").severity == "error"


def test_entries_are_complete():
    for info in codes.registry().values():
        assert SEVERITY.match(info.severity) or info.severity.startswith(("error", "warning", "info")), info
        assert info.meaning and info.fix and info.section, info


def test_findings_page_is_generated_from_the_registry():
    assert (ROOT / "docs" / "findings.md").read_text() == codes.render_markdown(), (
        "docs/findings.md differs from kit/codes.json: run `python -m kit.codes --write`"
    )


def test_lookup_and_cli(capsys):
    assert codes.lookup("launch.spec_verify").code == "launch.spec_verify"
    assert codes.lookup("no.such") is None
    assert codes.main(["--check"]) == 0
    assert codes.main(["no.such"]) == 2
    assert "no such finding code" in capsys.readouterr().err
