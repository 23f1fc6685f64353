"""The finding codes, collected from where they are declared; docs/findings.md is generated from them.

Every finding the kit reports carries a stable code (`kit.findings.Finding.code`). Each code is declared once,
at module level beside the rule that raises it, as a `kit.findings.Code` (section, highest severity, meaning,
typical fix), and raised through it (`KEYS_DROPPED(title, evidence={...})`; a severity above the declared one is
refused). This module imports every kit module that declares codes (found by reading the sources, so `import
kit` stays light), collects `kit.findings.CODES` and renders docs/findings.md from it; `kit/tests/test_codes.py`
fails when the page differs, or when a code written anywhere in kit/ is declared nowhere.

    python -m kit.codes --check        # docs/findings.md is what the declarations generate (exit 1 if not)
    python -m kit.codes --write        # regenerate docs/findings.md
    python -m kit.codes launch.spec_verify   # one code's entry

Adding a code: declare it beside its rule (`NAME = Code("area.name", SECTION, "error", meaning, fix)`), raise it
(`NAME(title, evidence=...)`), then `python -m kit.codes --write`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from dataclasses import asdict
from functools import cache
from pathlib import Path

from kit.findings import CODES, SECTIONS, Code

KIT = Path(__file__).resolve().parent
DOC = KIT.parent / "docs" / "findings.md"
DECLARES = re.compile(r"^[A-Z_][A-Z0-9_]* = Code\(", re.M)  # a module-level declaration

PREAMBLE = """# Finding codes

Every check in the kit reports findings with one of these stable codes. `severity` is the
highest a check may raise it at (a policy such as "error / warning" lists the severities it is raised
at, the first the highest; raising one above it is refused); a check may lower it where the
evidence is weaker (say so in the title).
This page is generated from the codes' declarations (`kit.findings.Code`, each beside the rule that raises it;
`python -m kit.codes --write`); a test (`kit/tests/test_codes.py`) fails when a code written in `kit/` is
declared nowhere, or this page differs from what the declarations generate.
"""


def declaring_modules() -> list[str]:
    """The kit modules (tests excluded) whose source declares a `Code` at module level."""
    out = []
    for p in sorted(KIT.rglob("*.py")):
        rel = p.relative_to(KIT.parent)
        if "tests" not in rel.parts and DECLARES.search(p.read_text()):
            out.append(".".join(rel.with_suffix("").parts).removesuffix(".__init__"))
    return out


@cache
def registry() -> dict[str, Code]:
    """{code: Code}, every declaring module imported: by section (SECTIONS' order), then module, then the
    order of declaration."""
    for m in declaring_modules():
        importlib.import_module(m)
    codes = sorted(CODES.values(), key=lambda c: (SECTIONS.index(c.section), c.module))
    return {c.code: c for c in codes}


def lookup(code: str) -> Code | None:
    return registry().get(code)


def render_markdown() -> str:
    """docs/findings.md: the preamble, then one table row per code, a comment line opening each section."""
    lines = [PREAMBLE, "| code | severity | meaning | typical fix |", "|---|---|---|---|"]
    section = None
    for info in registry().values():
        if info.section != section:
            section = info.section
            lines.append(f"<!-- {section} -->")
        lines.append(f"| `{info.code}` | {info.severity} | {info.meaning} | {info.fix} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kit.codes", description=__doc__.split("\n")[0])
    p.add_argument("code", nargs="?", help="print one code's entry")
    p.add_argument("--check", action="store_true", help="exit 1 when docs/findings.md differs from the declarations")
    p.add_argument("--write", action="store_true", help="regenerate docs/findings.md from the declarations")
    a = p.parse_args(argv)
    if a.code:
        info = lookup(a.code)
        if info is None:
            print(f"python -m kit.codes: error: {a.code}: no such finding code", file=sys.stderr)
            return 2
        print(json.dumps(asdict(info), indent=1))
        return 0
    text = render_markdown()
    if a.write:
        DOC.write_text(text)
        print(f"wrote {DOC} ({len(registry())} codes)")
        return 0
    same = DOC.is_file() and DOC.read_text() == text
    print(f"{DOC}: {'matches' if same else 'differs from'} the declarations ({len(registry())} codes)")
    return 0 if same or not a.check else 1


if __name__ == "__main__":
    sys.exit(main())
