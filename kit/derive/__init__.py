"""The maintainer's side room: the scanners that derive `kit.sglang`'s per-release tables from each release's wheel.

What a release does (its flags, aux capture, loader, quantization, sharding, dtype, variables, auto-choice, the
trees its verify step crashes on) is read by `kit.sglang` from recorded tables and rules; the code that derives
them from SGLang's real source runs only when a release is added or a table re-checked, never while the kit
diagnoses, launches or measures. It lives here, beside the runtime rather than in it (as tzdata's build tools stay
out of zoneinfo): no core module imports `kit.derive` (tests/test_architecture.py), and the scanners import
`kit.sglang`, never the reverse. On a user's machine `python -m kit.sglang.releases --derive V` runs them for a
release newer than the tables.

`flag_scan` (each release's real parser, run once), `capture_scan`, `loader_scan`, `quant_scan`, `sharding_scan`
and `env_vars_scan` write the tables `kit/sglang/*.json`; `dtype_scan`, `auto_scan` and `verify_scan` check rules
written in code (`kit.sglang.dtype.DTYPE_RULES`, `kit.sglang.params.AUTO_RULES`, `.VERIFY_SHAPE`) against the source.

    python -m kit.derive.<scan> --write [V...]   # re-derive and store a table (its module says which releases)
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


def write_table(path: Path, doc: dict) -> None:
    """Write a derived rule table (`python -m kit.derive.<scan> --write`) as the repository stores it: rows equal
    to an earlier release's as {"same_as": release} (dedupe_rows)."""
    doc = {**doc, "versions": dedupe_rows(doc["versions"])}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")
