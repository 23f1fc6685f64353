"""Finding codes are declared where they are raised (`kit.findings.Code`, one module-level object per code) and
collected by `kit.codes`: every code written in kit/ is declared, every declaration is collected and used, a
severity above a code's ceiling is refused, and docs/findings.md is what the declarations generate."""

import ast
import re
from pathlib import Path

import pytest

from kit import codes
from kit.findings import CODES, SEVERITIES, Code, Finding

ROOT = Path(__file__).resolve().parents[2]
SEVERITY = re.compile(r"^(error|warning|info)( / (error|warning|info))*$")


def sources() -> dict[Path, str]:
    return {p: p.read_text() for p in sorted((ROOT / "kit").rglob("*.py")) if "tests" not in p.relative_to(ROOT).parts}


def test_every_code_written_in_kit_is_declared():
    """A string in kit/ that looks like a code (a declared code's area, a dot, a name) names a declared code,
    and no finding is made with a literal code (raise through the code's `Code` object)."""
    areas = "|".join(sorted({c.split(".")[0] for c in codes.registry()}))
    looks = re.compile(rf"^({areas})\.[a-z0-9_]+$")
    undeclared, literal = set(), []
    for p, text in sources().items():
        for n in ast.walk(ast.parse(text)):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and looks.match(n.value):
                if n.value not in codes.registry():
                    undeclared.add(f"{n.value} ({p.relative_to(ROOT)}:{n.lineno})")
            if isinstance(n, ast.Call) and ast.unparse(n.func) == "Finding":
                kw = {k.arg: k.value for k in n.keywords}
                if isinstance(kw.get("code"), ast.Constant) or (n.args and isinstance(n.args[0], ast.Constant)):
                    literal.append(f"{p.relative_to(ROOT)}:{n.lineno}")
    assert not undeclared, f"codes written in kit/ but declared nowhere (declare a Code): {sorted(undeclared)}"
    assert not literal, f"findings made with a literal code (raise through its Code): {literal}"


def test_every_declaration_is_collected_and_used():
    """Each `Code(...)` in kit/ is a module-level assignment (declared at import, collected by kit.codes), and
    its name is used beyond the declaration."""
    declared, nested = {}, []
    text = "\n".join(sources().values())
    for p, src in sources().items():
        tree = ast.parse(src)
        top = {id(n.value) for n in tree.body if isinstance(n, ast.Assign)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and ast.unparse(n.func) == "Code" and p.name != "findings.py":
                if id(n) not in top:
                    nested.append(f"{p.relative_to(ROOT)}:{n.lineno}")
        for n in tree.body:
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and ast.unparse(n.value.func) == "Code":
                declared[n.targets[0].id] = n.value.args[0].value
    assert not nested, f"Code declared below module level (kit.codes would not see it): {nested}"
    assert sorted(declared.values()) == sorted(codes.registry()), "kit.codes does not collect every declaration"
    unused = [c for name, c in declared.items() if len(re.findall(rf"\b{name}\b", text)) < 2]
    assert not unused, f"codes declared but raised nowhere: {unused}"


def test_a_finding_above_its_ceiling_is_refused():
    codes.registry()
    gpu = CODES["env.gpu"]
    assert gpu.ceiling == "info" and CODES["env.torch"].ceiling == "error"
    assert gpu("1x H200").severity == "info" and gpu("1x H200").fix == ""
    f = CODES["env.torch"]("old torch", evidence={"v": 1}, severity="warning", fix="upgrade")
    assert (f.code, f.severity, f.evidence, f.fix) == ("env.torch", "warning", {"v": 1}, "upgrade")
    with pytest.raises(ValueError, match="env.gpu: severity 'warning' above 'info'"):
        gpu("1x H200", severity="warning")
    with pytest.raises(ValueError, match="env.gpu: severity 'warning' above 'info'"):
        Finding(code="env.gpu", severity="warning", title="1x H200")
    # a code no module declares (a test's, a toy engine's) has no ceiling
    assert Finding(code="toy.thing", severity="error", title="t").severity == "error"


def test_a_code_is_declared_once():
    codes.registry()
    again = CODES["env.gpu"]
    with pytest.raises(ValueError, match="env.gpu declared twice"):
        Code("env.gpu", again.section, "info", "another meaning", "—")
    with pytest.raises(ValueError, match="section"):
        Code("toy.new", "no such section", "info", "m", "f")
    assert CODES["env.gpu"] is again and "toy.new" not in CODES


def test_entries_are_complete():
    for info in codes.registry().values():
        assert SEVERITY.match(info.severity) and info.ceiling in SEVERITIES, info
        assert info.meaning and info.fix and info.section and info.module.startswith("kit."), info


def test_findings_page_is_generated_from_the_declarations():
    assert (ROOT / "docs" / "findings.md").read_text() == codes.render_markdown(), (
        "docs/findings.md differs from the codes' declarations: run `python -m kit.codes --write`"
    )


def test_lookup_and_cli(capsys):
    assert codes.lookup("launch.spec_verify").module == "kit.sglang.params"
    assert codes.lookup("no.such") is None
    assert codes.main(["--check"]) == 0
    assert codes.main(["no.such"]) == 2
    assert "no such finding code" in capsys.readouterr().err
