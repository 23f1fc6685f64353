"""The maintainer's side room: the scanners that derive `kit.sglang`'s per-release tables from each release's wheel.

What a release does (its flags, aux capture, loader, quantization, sharding, dtype, variables, auto-choice, the
trees its verify step crashes on) is read by `kit.sglang` from recorded tables and rules; the code that derives
them from SGLang's real source runs only when a release is added or a table re-checked, never while the kit
diagnoses, launches or measures. It lives here, beside the runtime rather than in it (as tzdata's build tools stay
out of zoneinfo): no core module imports `kit.derive` (tests/test_architecture.py), and the scanners import
`kit.sglang`, never the reverse. `python -m kit.sglang.releases --add V` runs them all for a new release into the
repository's tables (each table scanner's `add_rows`: V's row added, every other row as stored) and the rule checks
(each check scanner's `compare`); on a user's machine `--derive V` writes the same rows into the kit cache.

`flag_scan` (each release's real parser, run once), `capture_scan`, `loader_scan`, `quant_scan`, `sharding_scan`
and `env_vars_scan` write the tables `kit/sglang/*.json`; `dtype_scan`, `auto_scan` and `verify_scan` check rules
written in code (`kit.sglang.dtype.DTYPE_RULES`, `kit.sglang.params.AUTO_RULES`, `.VERIFY_SHAPE`) against the source.

    python -m kit.derive.<scan> --write [V...]   # re-derive these releases' rows and store the table, other rows kept
    python -m kit.derive.<scan> V                # print what release V's source gives

Wheels are downloaded once into the kit cache (`kit.sglang.source`); docs/architecture.md ("A new SGLang
release") walks the whole procedure. `write_table` stores a derived table as the repository keeps it (`dedupe_rows`).
"""

import json
from pathlib import Path


def dedupe_rows(rows: dict[str, dict]) -> dict[str, dict]:
    """Rows in release order, each one equal to an earlier row replaced by {"same_as": the first such release}
    (what `kit.sglang.versions.stored_rows` resolves)."""
    from kit.sglang.versions import sort_versions

    seen: dict[str, str] = {}
    out: dict[str, dict] = {}
    for v in sort_versions(rows):
        key = json.dumps(rows[v], sort_keys=True)
        out[v] = {"same_as": seen[key]} if key in seen else rows[v]
        seen.setdefault(key, v)
    return out


def read_rows(path: Path) -> dict[str, dict]:
    """The rows of a stored table file as the repository holds them, `same_as` resolved (and none of the rows
    `python -m kit.sglang.releases --derive V` wrote into the kit cache, which `kit.sglang.versions.stored_rows` adds)."""
    rows = json.loads(path.read_text())["versions"]
    return {v: rows[r["same_as"]] if "same_as" in r else r for v, r in rows.items()}


def write_text(path: Path, text: str) -> bool:
    """Write a table file unless it already holds exactly `text`; True when it changed."""
    if path.exists() and path.read_text() == text:
        print(f"unchanged {path}")
        return False
    path.write_text(text)
    print(f"wrote {path}")
    return True


def write_table(path: Path, doc: dict) -> bool:
    """Write a derived rule table (`python -m kit.derive.<scan> --write`) as the repository stores it: rows equal
    to an earlier release's as {"same_as": release} (dedupe_rows). True when the file changed."""
    doc = {**doc, "versions": dedupe_rows(doc["versions"])}
    return write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
