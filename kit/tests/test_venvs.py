"""Side environments see the packages of the interpreter running the kit — a venv's too, not only its base's.

Builds a real (empty-recipe) side environment with `python -m venv`; nothing is downloaded.
Run: python -m pytest kit/tests/test_venvs.py -q
"""

import json
import subprocess
import sys
import sysconfig

import pytest

import kit.venvs as venvs
from kit.findings import KitInputError


@pytest.fixture
def root(monkeypatch, tmp_path):
    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path))
    return tmp_path


def test_parent_dirs_are_this_interpreters():
    dirs = venvs.parent_site_dirs()
    assert sysconfig.get_paths()["purelib"] in dirs
    assert all(d in sys.path or d.endswith("site-packages") for d in dirs)


def test_side_env_imports_what_this_interpreter_has(root, monkeypatch):
    """torch is installed here (in a venv: not in the base interpreter); the side environment imports it."""
    monkeypatch.setattr(venvs, "recipe", lambda name, pins=None: ([], "import torch, kit.findings"))
    py = venvs.ensure_venv("sglang-9.9.9")
    assert py.parent.parent.name.startswith("sglang-9.9.9-") and venvs.is_built("sglang-9.9.9")
    out = subprocess.run(
        [str(py), "-c", "import sys, torch; print(sys.prefix); print(torch.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[0] == str(py.parent.parent) and out[1].startswith(tuple(venvs.parent_site_dirs()))
    # a changed recipe (or another parent interpreter) means the environment is stale
    monkeypatch.setattr(venvs, "recipe", lambda name, pins=None: ([], "import torch"))
    assert not venvs.is_built("sglang-9.9.9")


def test_a_build_removes_the_environments_whose_parent_is_gone(root, monkeypatch, tmp_path_factory):
    """Each fresh checkout's venv gets its own side environments; once that venv is deleted they serve no one."""
    gone_parent, live_parent = tmp_path_factory.mktemp("gone"), tmp_path_factory.mktemp("live")
    for name, parent in [("sglang-1.0-aaaa", gone_parent), ("sglang-1.0-bbbb", live_parent)]:
        (root / name).mkdir()
        (root / name / ".kit-complete").write_text(json.dumps({"parent": [str(parent)]}))
        (root / f".{name}.lock").touch()
    (root / "sglang-1.0-cccc").mkdir()  # a build in progress: no stamp yet
    gone_parent.rmdir()
    monkeypatch.setattr(venvs, "recipe", lambda name, pins=None: ([], "import torch"))
    venvs.ensure_venv("sglang-9.9.7")
    left = sorted(p.name for p in root.iterdir())
    assert "sglang-1.0-aaaa" not in left and ".sglang-1.0-aaaa.lock" not in left
    assert {"sglang-1.0-bbbb", ".sglang-1.0-bbbb.lock", "sglang-1.0-cccc"} <= set(left)


def test_failed_build_names_the_step_and_is_remembered(root, monkeypatch):
    monkeypatch.setattr(venvs, "recipe", lambda name, pins=None: ([], "import no_such_module_here"))
    with pytest.raises(KitInputError, match="no_such_module_here"):
        venvs.ensure_venv("sglang-9.9.8")
    calls = []
    monkeypatch.setattr(venvs, "_build", lambda *a: calls.append(a))
    with pytest.raises(KitInputError, match="cached"):
        venvs.ensure_venv("sglang-9.9.8")
    assert calls == []


def test_recipes_per_release():
    from kit.sglang.flags import recorded_closure

    steps, check = venvs.recipe("sglang-0.5.17", recorded_closure("0.5.17"))
    assert steps[0] == ["--no-deps", "sglang==0.5.17"] and check == "import sglang.srt.server_args"
    # a recorded release installs the closure its parser imported, at that release's pins, without a resolver run
    assert steps[1][0] == "--no-deps" and "transformers==5.12.1" in steps[1] and "triton==3.9.0" in steps[1]
    assert "transformers==5.19.0" in venvs.recipe("sglang-0.5.23", recorded_closure("0.5.23"))[0][1]
    other, _ = venvs.recipe("sglang-0.5.20")  # no pins: the wheel's own requirements, read after installing it
    assert other[1][0] == "@requires:sglang"
    with pytest.raises(KitInputError, match="unknown side environment"):
        venvs.recipe("sglang")
