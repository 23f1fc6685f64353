"""Derive a release's `_auto_choose_speculative_params` from its real source (read as text, never imported).

When a launch gives none of steps/topk/draft tokens, SGLang picks them from the target class. In every
release the function is one if/elif chain over `arch in [...]` lists, each returning a (steps, topk,
draft tokens) triple, an `else` for every other class, and (from 0.5.2) an early return for STANDALONE;
what changed between releases is which classes get which triple and what the others get. `derive` reads
that chain with `ast` and returns it as data, so the per-release rule `kit.sglang.params.AUTO_RULES`
records is checked against SGLang's code (kit/tests/sglang/test_auto_scan.py; skipped offline).

    python -m kit.derive.auto_scan [VERSION ...]     # each release's chain as JSON
"""

from __future__ import annotations

import ast
import json
import sys
from typing import Any

from kit.sglang.versions import DEFAULT_RELEASE

FUNCTIONS = ("_auto_choose_speculative_params", "auto_choose_speculative_params")
# where it lives: the speculative argument hook in current releases, server_args.py before
FILES = ("srt/arg_groups/speculative_hook.py", "srt/server_args.py")


def _returned(body: list[ast.stmt]) -> tuple[int, ...] | None:
    ret = next((s for s in body if isinstance(s, ast.Return)), None)
    return tuple(ast.literal_eval(ret.value)) if ret is not None and ret.value is not None else None


def _classes(test: ast.expr) -> list[str]:
    """The class list of `arch in [...]` (any variable name)."""
    if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.In):
        return list(ast.literal_eval(test.comparators[0]))
    return []


def read_chain(text: str) -> dict[str, Any] | None:
    """{"standalone": triple or None, "branches": [[classes, triple], ...], "default": triple} of the
    function in `text`; None when `text` has no such function."""
    fn = next(
        (n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name in FUNCTIONS),
        None,
    )
    if fn is None:
        return None
    out: dict[str, Any] = {"standalone": None, "branches": [], "default": None}
    for stmt in fn.body:
        if not isinstance(stmt, ast.If):
            continue
        if "STANDALONE" in ast.unparse(stmt.test):
            out["standalone"] = _returned(stmt.body)
            continue
        if not _classes(stmt.test):  # a guard before the chain (0.4.5-0.4.6: config.json must exist)
            continue
        node = stmt
        while True:
            out["branches"].append([_classes(node.test), _returned(node.body)])
            if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                node = node.orelse[0]
                continue
            out["default"] = _returned(node.orelse) if node.orelse else None
            break
    return out


def derive(version: str) -> dict[str, Any]:
    """That release's chain (`read_chain`) and the file it is in; {"file": None} when it has none."""
    from kit.sglang.source import source_text

    for rel in FILES:
        text = source_text(version, rel)
        chain = read_chain(text) if text else None
        if chain is not None:
            return {"version": version, "file": rel, **chain}
    return {"version": version, "file": None}


def compare(version: str) -> str | None:
    """None when `kit.sglang.params.AUTO_RULES` answers for the release as its chain does; else what differs."""
    from kit.sglang.params import SpecParams, auto_params

    d = derive(version)
    if not d["file"]:
        return f"no {FUNCTIONS[0]} in {' or '.join(FILES)}"
    bad = [
        f"{arch}: {'-'.join(map(str, triple))}"
        for classes, triple in d["branches"]
        for arch in classes
        if auto_params("EAGLE3", arch, version).given() != SpecParams(*triple).given()
    ]
    if auto_params("EAGLE3", "NoSuchForCausalLM", version) != SpecParams(*d["default"]):
        bad.append(f"any other target: {'-'.join(map(str, d['default']))}")
    standalone = d["standalone"] or d["default"]  # no STANDALONE branch: it goes down the chain
    if auto_params("STANDALONE", "NoSuchForCausalLM", version) != SpecParams(*standalone):
        bad.append(f"STANDALONE: {'-'.join(map(str, standalone))}")
    return f"{d['file']} chooses {'; '.join(bad)}" if bad else None


if __name__ == "__main__":
    for v in sys.argv[1:] or [DEFAULT_RELEASE]:
        print(json.dumps(derive(v)))
