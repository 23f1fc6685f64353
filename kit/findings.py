"""Findings: the one currency every check in the kit pays in.

A check looks at facts (a config, a safetensors header, a launch command, the GPU) and
returns `Finding`s — a stable `code` (documented in docs/findings.md), a `severity`, a
one-line `title`, the `evidence` it saw and the `fix`. A `Report` collects them and renders
the same content three ways: a terminal table, a pandas DataFrame / HTML table for
notebooks, and JSON (one document, printed as the last line of stdout by `--json`).

Exit codes (shared by every verb):
    0  ran, no error findings
    1  ran, at least one error finding
    2  could not run: bad arguments or unreadable input (`KitInputError`), one-line message

    >>> r = Report([Finding(code="env.no_gpu", severity="info", title="no GPU", fix="")])
    >>> r.exit_code()
    0
"""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("error", "warning", "info")
EXIT_OK, EXIT_ERRORS, EXIT_CANNOT_RUN = 0, 1, 2


class KitInputError(Exception):
    """The kit could not run: bad argument or unreadable input. Message names the file and problem."""


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str = ""

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"finding {self.code}: severity {self.severity!r} not in {SEVERITIES}")
        if "\n" in self.title:
            raise ValueError(f"finding {self.code}: title must be one line")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _evidence_text(ev: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in ev.items())


@dataclass
class Report:
    """An ordered list of findings plus free-form `facts` (what was observed, for the summary)."""

    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def extend(self, items: Iterable[Finding]) -> Report:
        self.findings.extend(items)
        return self

    def add(self, *items: Finding) -> Report:
        return self.extend(items)

    def by_code(self, code: str) -> list[Finding]:
        return [f for f in self.findings if f.code == code]

    def codes(self) -> set[str]:
        return {f.code for f in self.findings}

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def summary(self) -> dict[str, Any]:
        counts = {s: sum(f.severity == s for f in self.findings) for s in SEVERITIES}
        return {**counts, "total": len(self.findings), "ok": counts["error"] == 0}

    def exit_code(self) -> int:
        return EXIT_ERRORS if self.errors else EXIT_OK

    # -- renderings -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = {"findings": [f.to_dict() for f in self.findings], "summary": self.summary()}
        if self.facts:
            out["facts"] = self.facts
        return out

    def to_json(self) -> str:
        # one line: `--json` promises the document is the last line of stdout
        return json.dumps(self.to_dict(), default=str, separators=(",", ":"))

    def to_frame(self):
        import pandas as pd

        rows = [{**f.to_dict(), "evidence": _evidence_text(f.evidence)} for f in self.findings]
        return pd.DataFrame(rows, columns=["severity", "code", "title", "evidence", "fix"])

    def _repr_html_(self) -> str:
        if not self.findings:
            return "<p>No findings.</p>"
        return self.to_frame().to_html(index=False, escape=True)

    def render_text(self, width: int | None = None) -> str:
        width = width or max(80, shutil.get_terminal_size((120, 20)).columns)
        order = {s: i for i, s in enumerate(SEVERITIES)}
        lines = []
        mark = {"error": "ERROR", "warning": "WARN ", "info": "info "}
        for f in sorted(self.findings, key=lambda f: order[f.severity]):
            lines.append(f"{mark[f.severity]} {f.code:<24} {f.title}")
            ind = " " * 31
            if f.evidence:
                lines += textwrap.wrap(
                    "evidence: " + _evidence_text(f.evidence), width, initial_indent=ind, subsequent_indent=ind + "  "
                )
            if f.fix:
                lines += textwrap.wrap("fix: " + f.fix, width, initial_indent=ind, subsequent_indent=ind + "  ")
        s = self.summary()
        lines.append(f"{s['error']} error(s), {s['warning']} warning(s), {s['info']} info")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render_text()


def emit(report: Report, as_json: bool) -> int:
    """Print a report the way every verb does and return its exit code."""
    if as_json:
        print(report.to_json())
    else:
        print(report.render_text())
    return report.exit_code()
