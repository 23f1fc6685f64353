"""Findings: the one currency every check in the kit pays in.

A check looks at facts (a config, a safetensors header, a launch command, the GPU) and returns `Finding`s: a stable
`code`, a `severity`, a one-line `title`, the `evidence` it saw and the `fix`. Each code is declared once, beside
the rule that raises it, as a `Code` (section, highest severity, meaning, typical fix; docs/findings.md is generated
from the declarations by `kit.codes`). A `Report` renders its findings as plain text (a pipe or a log), a `rich`
table on a terminal, HTML / a DataFrame in notebooks, and one JSON line (`--json`); all but JSON fold info findings
under a count unless `verbose`.

Exit codes (shared by every verb): 0 no error findings, 1 at least one, 2 could not run (`KitInputError`: bad
arguments or unreadable input, a one-line message).

    >>> Report([Finding(code="env.no_gpu", severity="info", title="no GPU", fix="")]).exit_code()
    0
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
import shlex
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from functools import wraps
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
        declared = CODES.get(self.code)  # a code no module declares (a test's, a toy engine's) has no ceiling
        if declared and SEVERITIES.index(self.severity) < SEVERITIES.index(declared.ceiling):
            raise ValueError(
                f"finding {self.code}: severity {self.severity!r} above {declared.ceiling!r}, "
                f"the ceiling {declared.module} declares"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# the notebook stage that shows a code: docs/findings.md's sections, in this order
SECTIONS = (
    "env: notebook 01",
    "ckpt/draft: notebook 02",
    "aux/probe/oracle: notebook 03",
    "launch/process/logs: notebook 04",
    "bench/verdict: notebook 05",
)
CODES: dict[str, Code] = {}  # every declared code, filled as the declaring modules import (kit.codes imports all)


@dataclass(frozen=True)
class Code:
    """A finding code, declared once beside the rule that raises it, and the way to raise it:
    `KEYS_DROPPED = Code("draft.keys_dropped", SECTION, "error", meaning, fix)`, then `KEYS_DROPPED(title,
    evidence={...})`. `severity`: the highest it may be raised at, or a policy such as "error / info" (the first
    the highest); `fix`: the typical fix docs show. Declaring registers it in `CODES` (a second, different
    declaration of the same code is refused)."""

    code: str
    section: str
    severity: str
    meaning: str
    fix: str
    module: str = field(default="", compare=False)

    def __post_init__(self):
        if not re.fullmatch(r"[a-z]+\.[a-z0-9_]+", self.code):
            raise ValueError(f"finding code {self.code!r}: expected area.name")
        if self.section not in SECTIONS:
            raise ValueError(f"finding code {self.code}: section {self.section!r} not in {SECTIONS}")
        if not set(self.severity.split(" / ")) <= set(SEVERITIES) or not (self.meaning and self.fix):
            raise ValueError(f"finding code {self.code}: severity {self.severity!r}, meaning and fix required")
        if not self.module:
            object.__setattr__(self, "module", sys._getframe(2).f_globals.get("__name__", ""))
        old = CODES.get(self.code)
        if old and (old != self or "__main__" not in (old.module, self.module) and old.module != self.module):
            raise ValueError(f"finding code {self.code} declared twice: in {old.module} and in {self.module}")
        CODES[self.code] = self

    @property
    def ceiling(self) -> str:
        return self.severity.split(" / ")[0]

    def __call__(
        self, title: str, evidence: dict[str, Any] | None = None, severity: str | None = None, fix: str = ""
    ) -> Finding:
        """A finding of this code, at the declared severity unless a lower one is given."""
        return Finding(self.code, severity or self.ceiling, title, {} if evidence is None else evidence, fix)


def finding_list(rule: Callable[..., Iterable[Finding]]) -> Callable[..., list[Finding]]:
    """A rule written as a generator of findings, called as a function that returns their list."""

    @wraps(rule)
    def listed(*args, **kwargs) -> list[Finding]:
        return list(rule(*args, **kwargs))

    return listed


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

    def to_dict(self) -> dict[str, Any]:
        facts = {"facts": self.facts} if self.facts else {}
        return {"findings": [f.to_dict() for f in self.findings], "summary": self.summary(), **facts}

    def to_json(self) -> str:
        # one line: `--json` promises the document is the last line of stdout
        return json.dumps(self.to_dict(), default=str, separators=(",", ":"))

    def to_frame(self):
        import pandas as pd

        rows = [{**f.to_dict(), "evidence": _evidence_text(f.evidence)} for f in self.findings]
        return pd.DataFrame(rows, columns=["severity", "code", "title", "evidence", "fix"])

    def _shown_and_folded(self, verbose: bool) -> tuple[list[Finding], list[Finding]]:
        ordered = sorted(self.findings, key=lambda f: SEVERITIES.index(f.severity))
        if verbose:
            return ordered, []
        return [f for f in ordered if f.severity != "info"], [f for f in ordered if f.severity == "info"]

    def summary_line(self) -> str:
        s = self.summary()
        return f"{_count(s['error'], 'error')}, {_count(s['warning'], 'warning')}, {s['info']} info"

    def _folded_line(self, folded: list[Finding]) -> str:
        codes = ", ".join(dict.fromkeys(f.code for f in folded))
        return f"+ {_count(len(folded), 'info finding')} not shown ({codes}); --verbose shows them"

    def render_text(self, width: int | None = None, verbose: bool = True) -> str:
        """Plain text wrapped to `width` (default: the terminal's, 80 when piped); `verbose=False` folds info."""
        width = width or shutil.get_terminal_size((80, 24)).columns
        shown, folded = self._shown_and_folded(verbose)
        lines: list[str] = []
        ind = " " * 6
        for f in shown:
            lines += textwrap.wrap(f"{_MARK[f.severity]} {f.code}: {f.title}", width, subsequent_indent=ind)
            if f.evidence:
                lines += textwrap.wrap(
                    "evidence: " + _evidence_text(f.evidence), width, initial_indent=ind, subsequent_indent=ind + "  "
                )
            if f.fix:
                lines += _fix_lines(f.fix, width, ind)
        if folded:
            lines += textwrap.wrap(self._folded_line(folded), width, subsequent_indent="  ")
        lines.append(self.summary_line())
        return "\n".join(lines)

    def render_rich(self, console=None, verbose: bool = True) -> None:
        """A table on a terminal (colours, wrapped to its width); `rich` decides colour from the TTY."""
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        console = console or Console()
        shown, folded = self._shown_and_folded(verbose)
        if shown:
            t = Table(show_header=True, header_style="bold", box=None, pad_edge=False, padding=(0, 1, 1, 0))
            t.add_column("", no_wrap=True)
            t.add_column("code", no_wrap=True, style="bold")
            t.add_column("finding", overflow="fold")
            for f in shown:
                cell = Text(f.title)
                if f.evidence:
                    cell.append("\nevidence: " + _evidence_text(f.evidence), style="dim")
                if f.fix:
                    cell.append("\nfix: ", style="green").append(f.fix)
                t.add_row(Text(_MARK[f.severity].strip(), style=_STYLE[f.severity]), f.code, cell)
            console.print(t)
        if folded:
            console.print(Text(self._folded_line(folded), style="dim"))
        console.print(Text(self.summary_line(), style="bold red" if self.errors else "bold green"))

    def _repr_html_(self) -> str:
        """The notebook twin of the terminal table: errors and warnings shown, info folded under a count."""
        shown, folded = self._shown_and_folded(verbose=False)
        head = "<tr><th></th><th>code</th><th style='text-align:left'>finding</th></tr>"
        parts = []
        if shown:
            parts.append(f"<table>{head}{''.join(map(_html_row, shown))}</table>")
        if folded:
            parts.append(
                f"<details><summary>{html.escape(self._folded_line(folded).split(' not shown')[0])} "
                f"(click to show)</summary><table>{head}{''.join(map(_html_row, folded))}</table></details>"
            )
        parts.append(f"<p><b>{html.escape(self.summary_line())}</b></p>")
        return "".join(parts)

    def __str__(self) -> str:
        return self.render_text()


# a fix that starts like this is a command: wrapped with shell continuations so it still pastes
_COMMAND_PREFIXES = ("python ", "python3 ", "kit ", "--", "export ")
_WHOLE_WORDS = dict(break_on_hyphens=False, break_long_words=False)


def _fix_lines(fix: str, width: int, ind: str) -> list[str]:
    """A prose fix wraps like prose; a command is wrapped with shell continuations, and a trailing
    "(explanation)" becomes a `#` comment line, so the lines paste into a shell as they are."""
    if not fix.startswith(_COMMAND_PREFIXES) or len(ind) + 5 + len(fix) <= width:
        return textwrap.wrap("fix: " + fix, width, initial_indent=ind, subsequent_indent=ind + "  ", **_WHOLE_WORDS)
    m = re.match(r"^(.*?)\s+\(([^()]*)\)$", fix)
    cmd, note = m.groups() if m else (fix, "")
    body = textwrap.wrap(cmd, max(20, width - len(ind) - 4), **_WHOLE_WORDS)
    out = [ind + "fix:"]
    if note:
        out += textwrap.wrap(note, width, initial_indent=ind + "  # ", subsequent_indent=ind + "  # ")
    return out + [ind + "  " + b + (" \\" if i < len(body) - 1 else "") for i, b in enumerate(body)]


def _html_row(f: Finding) -> str:
    ev = (
        f"<br><small style='opacity:.7'>evidence: {html.escape(_evidence_text(f.evidence))}</small>"
        if f.evidence
        else ""
    )
    fix = f"<br><b style='color:#1a7f37'>fix:</b> <code>{html.escape(f.fix)}</code>" if f.fix else ""
    return (
        f"<tr><td style='color:{_HTML_COLOR[f.severity]};font-weight:bold'>{f.severity}</td>"
        f"<td><code>{html.escape(f.code)}</code></td><td style='text-align:left'>{html.escape(f.title)}{ev}{fix}</td></tr>"
    )


_MARK = {"error": "ERROR", "warning": "WARN ", "info": "info "}
_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_HTML_COLOR = {"error": "#cf222e", "warning": "#9a6700", "info": "#0969da"}


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def fill_placeholders(findings: Iterable[Finding], values: dict[str, str | None]) -> list[Finding]:
    """Fixes written with the user's own paths: each whole-word placeholder (SRC, DST, DRAFT_DIR, ...)
    in a fix becomes its value, shell-quoted, so the fix can be pasted as it is."""
    subs = {k: shlex.quote(v) for k, v in values.items() if v}
    if not subs:
        return list(findings)
    pat = re.compile(r"\b(" + "|".join(map(re.escape, subs)) + r")\b")
    return [replace(f, fix=pat.sub(lambda m: subs[m.group(1)], f.fix)) if f.fix else f for f in findings]


def _use_rich() -> bool:
    """Tables and colours on a terminal; plain text when piped (or when `rich` is not installed)."""
    return sys.stdout.isatty() and importlib.util.find_spec("rich") is not None


def write_json_line(doc: Any) -> None:
    """`doc` as one JSON line on stdout (`--json` promises the document is the last line), written as bytes:
    a 70k-tensor listing serializes in ~30 ms with orjson against ~170 ms with json, then skips the str encode."""
    import orjson

    data = orjson.dumps(doc, default=str, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
    buf = getattr(sys.stdout, "buffer", None)
    if buf is None:  # a replaced stdout (a notebook, a test's capture) takes text
        sys.stdout.write(data.decode())
        return
    sys.stdout.flush()
    buf.write(data)
    buf.flush()


def emit(report: Report, as_json: bool, verbose: bool = True) -> int:
    """Print a report the way every verb does and return its exit code (`verbose=False` folds info)."""
    if as_json:
        print(report.to_json())
    elif _use_rich():
        report.render_rich(verbose=verbose)
    else:
        print(report.render_text(verbose=verbose))
    return report.exit_code()
