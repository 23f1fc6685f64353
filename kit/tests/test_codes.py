"""Every finding code used in kit/ is documented in docs/findings.md, and vice versa."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def used_codes() -> set[str]:
    codes = set()
    for p in (ROOT / "kit").rglob("*.py"):
        if "tests" in p.relative_to(ROOT / "kit").parts:
            continue
        codes |= set(re.findall(r'code\s*=\s*"([a-z_]+\.[a-z0-9_.]+)"', p.read_text()))
    return codes


def documented_codes() -> set[str]:
    text = (ROOT / "docs" / "findings.md").read_text()
    return set(re.findall(r"^\|\s*`?([a-z_]+\.[a-z0-9_.]+)`?\s*\|", text, flags=re.M))


def test_codes_documented():
    missing = used_codes() - documented_codes()
    assert not missing, f"codes used in kit/ but not in docs/findings.md: {sorted(missing)}"


def test_no_stale_documented_codes():
    stale = documented_codes() - used_codes()
    assert not stale, f"codes in docs/findings.md used nowhere in kit/: {sorted(stale)}"
