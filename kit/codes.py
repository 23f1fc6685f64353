"""The registry of finding codes: one home per code (section, highest severity, meaning, fix, raising modules).

Every finding the kit reports carries a stable code (`kit.findings.Finding.code`). What each code means, the
highest severity it may be raised at (`ceiling`: a `Finding` above it is refused where it is made), what fixes
it and which modules raise it is written once, in `kit/codes.json`; `docs/findings.md` is generated from it,
and `kit/tests/test_codes.py` fails when a module raises a code the registry lacks, or above its ceiling, when
the registry names a code no module raises or a module that does not raise it, or when the generated page
differs from the file.

    python -m kit.codes --check        # docs/findings.md is what the registry generates (exit 1 if not)
    python -m kit.codes --write        # regenerate docs/findings.md
    python -m kit.codes launch.spec_verify   # one code's entry

Adding a code: raise it (a `Finding` with the new code), add its entry to `kit/codes.json` in its section
with the raising module in `owners`, then `python -m kit.codes --write`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

REGISTRY = Path(__file__).with_name("codes.json")
DOC = Path(__file__).resolve().parents[1] / "docs" / "findings.md"

PREAMBLE = """# Finding codes

Every check in the kit reports findings with one of these stable codes. `severity` is the
highest a check may raise it at (a policy such as "error / warning" lists the severities it is raised
at, the first the highest; `kit.findings.Finding` refuses one above it); a check may lower it where the
evidence is weaker (say so in the title).
This page is generated from the registry `kit/codes.json` (`python -m kit.codes --write`); a test
(`kit/tests/test_codes.py`) fails when a code raised in `kit/` is missing there, a registered code is raised
nowhere, or this page differs from what the registry generates.
"""


@dataclass(frozen=True)
class CodeInfo:
    code: str
    section: str  # the notebook stage that shows it, e.g. "env: notebook 01"
    severity: str  # the ceiling: "error", "warning", "info" or a policy such as "error / warning" (first: highest)
    meaning: str
    fix: str
    owners: tuple[str, ...]  # the modules that raise it


@lru_cache(maxsize=1)
def registry() -> dict[str, CodeInfo]:
    """{code: CodeInfo} in the registry's order."""
    doc = json.loads(REGISTRY.read_text())
    return {e["code"]: CodeInfo(**{**e, "owners": tuple(e["owners"])}) for e in doc["codes"]}


def lookup(code: str) -> CodeInfo | None:
    return registry().get(code)


@cache
def ceiling(code: str) -> str | None:
    """The highest severity `code` may be raised at (a policy's first), None for a code the registry lacks."""
    info = registry().get(code)
    return info.severity.split(" / ")[0] if info else None


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
    p.add_argument("--check", action="store_true", help="exit 1 when docs/findings.md differs from the registry")
    p.add_argument("--write", action="store_true", help="regenerate docs/findings.md from the registry")
    a = p.parse_args(argv)
    if a.code:
        info = lookup(a.code)
        if info is None:
            print(f"python -m kit.codes: error: {a.code}: no such finding code (kit/codes.json)", file=sys.stderr)
            return 2
        print(json.dumps(info.__dict__, indent=1))
        return 0
    text = render_markdown()
    if a.write:
        DOC.write_text(text)
        print(f"wrote {DOC} ({len(registry())} codes)")
        return 0
    same = DOC.is_file() and DOC.read_text() == text
    print(f"{DOC}: {'matches' if same else 'differs from'} the registry ({len(registry())} codes)")
    return 0 if same or not a.check else 1


if __name__ == "__main__":
    sys.exit(main())
