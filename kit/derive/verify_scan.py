"""Derive the verify step's shape assumption about draft tokens from a release's real source (never imported).

SGLang's EAGLE verify with a tree (topk > 1) moves each request's accepted path to the front of its
block of `num_draft_tokens` nodes (`_compact_accept_to_front`, called through `_finalize_accept_tree_path`
under `if ... topk > 1`). The path is `accept_index`, whose rows are `EagleVerifyInput.max_tree_depth`
(= spec_steps + 1) wide. This module

1. finds `_compact_accept_to_front` in the release's `srt/speculative/*.py` (a module function, or an
   `EAGLEWorkerV2` method in 0.5.13-0.5.15) and *runs its real body* with torch on the CPU for a grid of
   (steps, topk, draft tokens), with `accept_index` as wide as the release makes it;
2. reads the condition that guards the call (`topk > 1`) and the accept width (`spec_steps + 1`);

so the crash set `kit.sglang.params.verify_shape_issue` records is what SGLang's code does, not what we
think it does. `python -m kit.derive.verify_scan [VERSION ...]` prints each release's derivation as JSON;
kit/tests/sglang/test_verify_scan.py compares it with the recorded rule (skipped offline).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
import types
from typing import Any

from kit.sglang.versions import DEFAULT_RELEASE

FUNCTION = "_compact_accept_to_front"
CALLER = "_finalize_accept_tree_path"
SPEC_DIR = "srt/speculative"


def _find_function(files: dict[str, str]) -> tuple[str, ast.FunctionDef, str | None] | None:
    """(file, def node, enclosing class or None) of FUNCTION in the release's speculative package."""
    for rel, text in files.items():
        if FUNCTION not in text:
            continue
        tree = ast.parse(text)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == FUNCTION:
                return rel, node, None
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == FUNCTION:
                        return rel, item, node.name
    return None


def _guards(files: dict[str, str]) -> list[str]:
    """The `if` conditions under which CALLER (the tree-path finalizer) is called."""
    out = []
    for text in files.values():
        if CALLER not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.If) and any(
                isinstance(n, ast.Call) and CALLER in ast.unparse(n.func) for s in node.body for n in ast.walk(s)
            ):
                out.append(ast.unparse(node.test))
    return out


def _accept_width_offset(files: dict[str, str]) -> int | None:
    """k in `accept_index` width = spec_steps + k (`max_tree_depth`, or the literal allocation before it)."""
    text = files.get(f"{SPEC_DIR}/eagle_info.py", "")
    m = re.search(
        r"def max_tree_depth\(self\)[^:]*:(?:\s*\"\"\".*?\"\"\")?\s*return self\.spec_steps \+ (\d+)", text, re.S
    )
    m = m or re.search(r"\(bs, self\.spec_steps \+ (\d+)\)", text)
    return int(m.group(1)) if m else None


def _runner(node: ast.FunctionDef, cls: str | None):
    """The real function, compiled from its source, as f(x, accept_index, bs, num_draft_tokens)."""
    import torch

    ns: dict[str, Any] = {"torch": torch}
    fn = ast.FunctionDef(**{**node.__dict__, "decorator_list": []})
    exec(compile(ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[])), FUNCTION, "exec"), ns)
    f = ns[FUNCTION]
    params = list(inspect.signature(f).parameters)
    if cls is not None:  # a method: the draft-token count is read from self
        return lambda x, ai, bs, nd: f(types.SimpleNamespace(speculative_num_draft_tokens=nd), x, ai, bs)
    if "num_draft_tokens" in params:
        return lambda x, ai, bs, nd: f(x, ai, bs, num_draft_tokens=nd)
    raise ValueError(f"{FUNCTION}: unknown signature {params}")


def crashes(run, steps: int, topk: int, num_draft_tokens: int, width_offset: int, bs: int = 2) -> bool:
    """Does the real body raise for these parameters? (predict ids and hidden states, as verify passes them)"""
    import torch

    n, w = num_draft_tokens, steps + width_offset
    accept = torch.full((bs, w), -1, dtype=torch.int32)
    accept[:, 0] = torch.arange(bs, dtype=torch.int32) * n  # each request's root; the rest padded as unaccepted
    for x in (torch.arange(bs * n, dtype=torch.int32), torch.zeros(bs * n, 4)):
        try:
            run(x, accept, bs, n)
        except RuntimeError:
            return True
    return False


def derive(version: str, max_steps: int = 6, max_topk: int = 4) -> dict[str, Any]:
    """What the release's verify path does with each (steps, topk>1, draft tokens) of a small grid."""
    from kit.sglang.params import max_draft_tokens
    from kit.sglang.source import source_files

    files = source_files(version, SPEC_DIR)  # {"srt/speculative/x.py": text}
    found = _find_function(files)
    if found is None:
        return {"version": version, "function": None, "crashes": []}
    rel, node, cls = found
    offset = _accept_width_offset(files)
    if offset is None:
        raise ValueError(f"sglang {version}: accept_index width not found in {SPEC_DIR}/eagle_info.py")
    run = _runner(node, cls)
    grid = [
        (s, k, n)
        for s in range(1, max_steps + 1)
        for k in range(2, max_topk + 1)
        for n in range(2, max_draft_tokens(s, k) + 1)
    ]
    return {
        "version": version,
        "file": rel,
        "function": f"{cls}.{FUNCTION}" if cls else FUNCTION,
        "guards": _guards(files),
        "accept_width": f"spec_steps + {offset}",
        "crashes": [p for p in grid if crashes(run, *p, width_offset=offset)],
        "grid": len(grid),
    }


def recorded_crashes(version: str) -> set[tuple[int, int, int]]:
    """The (steps, topk, draft tokens) trees `kit.sglang.params.VERIFY_SHAPE` says `version`'s verify crashes on,
    over the grid `derive` probes."""
    from kit.sglang.params import max_draft_tokens, verify_shape_issue

    return {
        (s, k, n)
        for s in range(1, 7)
        for k in range(2, 5)
        for n in range(2, max_draft_tokens(s, k) + 1)
        if verify_shape_issue(s, k, n, version) is not None
    }


def compare(version: str) -> str | None:
    """None when `kit.sglang.params.VERIFY_SHAPE` gives the crash set the release's verify path has; else both."""
    from kit.sglang.params import verify_shape_issue

    d = derive(version)
    recorded = recorded_crashes(version)
    found = set(map(tuple, d["crashes"]))
    if found == recorded and (
        not found or verify_shape_issue(3, 2, 3, version).evidence["source"].split()[0] == d["file"]
    ):
        return None
    name = lambda ps: ", ".join(f"{s}-{k}-{n}" for s, k, n in sorted(ps)) or "none"  # noqa: E731
    return f"{d['function']} in {d.get('file')} crashes on {name(found)}; the record on {name(recorded)}"


if __name__ == "__main__":
    for v in sys.argv[1:] or [DEFAULT_RELEASE]:
        d = derive(v)
        print(json.dumps({**d, "crashes": [f"{s}-{k}-{n}" for s, k, n in d["crashes"]]}))
