"""How thin the kit is: lines of kit/ (tests aside) in the core, the entry modules and the side rooms, per room, and
how much of kit/ the notebooks' imports reach.

Why: the kit must stay thin (the core, what the five notebooks' story needs, under 20k lines; the whole kit not
growing as features land). The rooms are the ones `tests/test_architecture.py` enforces (SIDE_ROOMS, ENTRY), so
this counts exactly what that test keeps apart. Lines are `wc -l` lines. Prints one JSON document.

    python bench/bench_lines.py
"""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from pathlib import Path

from _run import emit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_architecture import ENTRY, graph, modules, side_room  # noqa: E402


def notebook_roots(mods: dict[str, Path]) -> set[str]:
    """The kit modules the notebooks' code cells import."""
    out = set()
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for n in ast.walk(ast.parse("".join(cell["source"]))):
                if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("kit"):
                    out |= {n.module, *(f"{n.module}.{a.name}" for a in n.names)}
                elif isinstance(n, ast.Import):
                    out |= {a.name for a in n.names}
    return out & set(mods)


def closure(roots: set[str], g: dict[str, set[str]]) -> set[str]:
    """`roots` and every kit module they import, transitively (a module's packages included: Python runs them)."""
    seen, todo = set(), list(roots)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            parts = m.split(".")
            todo += [*g.get(m, ()), *(".".join(parts[:i]) for i in range(1, len(parts)))]
    return seen & set(g)


def main() -> None:
    mods, g = modules(), graph()
    lines = {m: len(p.read_text().splitlines()) for m, p in mods.items()}
    part = {m: "side" if side_room(m) else "entry" if m in ENTRY else "core" for m in mods}
    rooms: dict[str, Counter] = {k: Counter() for k in ("core", "entry", "side")}
    for m, n in lines.items():
        rooms[part[m]][side_room(m) or (m.split(".")[1] if "." in m else m)] += n
    reached = closure(notebook_roots(mods), g)
    emit(
        {
            "kit_lines": sum(lines.values()),
            "modules": len(mods),
            **{f"{k}_lines": sum(c.values()) for k, c in rooms.items()},
            "rooms": {k: dict(c.most_common()) for k, c in rooms.items()},
            "notebooks_reach_lines": sum(lines[m] for m in reached),
            "notebooks_reach_share": round(sum(lines[m] for m in reached) / sum(lines.values()), 3),
            "side_rooms_notebooks_reach": sorted({side_room(m) for m in reached if side_room(m)}),
        }
    )


if __name__ == "__main__":
    main()
