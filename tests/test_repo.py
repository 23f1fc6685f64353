"""Repository hygiene a fresh clone depends on: README tree, notebook form, import weight.

Run: python -m pytest tests/test_repo.py
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(set(out.split()))


def test_readme_tree_lists_every_file():
    readme = (ROOT / "README.md").read_text()
    tree = readme[readme.index("## File tree") :]
    missing = [f for f in tracked_files() if f"{Path(f).name}" not in tree]
    assert not missing, f"README file tree lacks: {missing}"


@pytest.mark.parametrize("nb", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_form(nb):
    """Stored without outputs; one `parameters` cell first; cells orchestrate only (no def/class)."""
    cells = json.loads(nb.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert "parameters" in code[0].get("metadata", {}).get("tags", [])
    assert sum("parameters" in c.get("metadata", {}).get("tags", []) for c in code) == 1
    for c in code:
        assert c.get("outputs") == [] and c.get("execution_count") is None, "outputs not stripped"
        src = "".join(c["source"])
        tree = ast.parse("\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("%", "!"))))
        assert not [
            n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        ], f"{nb.name}: a cell defines a function or class; move it into kit/"
        assert len(src.splitlines()) <= 25, f"{nb.name}: cell longer than 25 lines"


def test_import_kit_is_light():
    """`import kit` must not pull torch, transformers, pandas or sglang (CPU laptop, fast CLI)."""
    code = "import sys, kit, kit.cli, kit.doctor; print(sorted(m for m in ('torch','transformers','pandas','sglang') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_module_has_a_docstring():
    for p in sorted((ROOT / "kit").glob("*.py")):
        assert ast.get_docstring(ast.parse(p.read_text())), f"{p.name} has no module docstring"
