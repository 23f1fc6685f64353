"""bench/bundle_imports.py on a site built here: which imports count as run at load, and what is reported absent.

python -m pytest tests/test_bundle_imports.py -q
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bundle_imports as bi  # noqa: E402


def _site(root: Path) -> Path:
    files = {
        "eng/__init__.py": "from .serve import main\n",
        "eng/serve.py": (
            "from typing import TYPE_CHECKING\n"
            "import json\n"
            "import carried_dep\n"
            "from . import cuda\n"
            "if TYPE_CHECKING:\n    import typing_only\n"
            "try:\n    import optional_dep\nexcept ImportError:\n    optional_dep = None\n"
            "def main():\n    import lazy_dep\n"
        ),
        "eng/cuda.py": "import numpy\nif on_gpu():\n    import gpu_only\n",
        "eng/unused.py": "import never_reached\n",
        "carried_dep/__init__.py": "from carried_dep.client import Client\n",
        "carried_dep/client.py": "import missing_http\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_walk_follows_load_time_imports_into_carried_packages_and_names_what_is_missing(tmp_path):
    doc = bi.walk(_site(tmp_path), ["eng"], image={"numpy"})
    # a carried package's own import, two packages deep, is what a venv holding it would hide
    assert doc["absent"] == {"missing_http": "carried_dep.client"}
    assert doc["absent_if"] == {"gpu_only": "eng.cuda"}  # runs only where the condition holds
    assert doc["modules_read"] == 5  # eng, eng.serve, eng.cuda, carried_dep, carried_dep.client; not eng.unused


def test_an_import_reached_both_ways_is_reported_once_as_unconditional(tmp_path):
    site = _site(tmp_path)
    (site / "eng/cuda.py").write_text("import numpy\nimport gpu_only\nif on_gpu():\n    import gpu_only\n")
    doc = bi.walk(site, ["eng"], image={"numpy"})
    assert "gpu_only" in doc["absent"] and "gpu_only" not in doc["absent_if"]
