"""Run a function on a module right after it executes, and the sitecustomize.py a copy shadows: the import
machinery both of the kit's recorders stand on.

The rehearsal's recorder (`kit.rehearsal.hooks`) and the server capture's (`kit.serving.capture_hook`) run inside
SGLang's own interpreters, where the kit need not be importable: each is copied as `sitecustomize.py` into a site
folder put first on SGLang's PYTHONPATH, and this file beside it as `kit_after_import.py`
(`install_as_sitecustomize`). Each then inserts an `AfterImport` finder that lets the rest of `sys.meta_path` find
a module, wraps its loader, and calls `after(module)` once the module's code has run (SGLang's files stay
untouched). `chain_next_sitecustomize` runs the sitecustomize.py the copy shadows (a distribution's, an
environment's), as Python would have run it. Standard library only.

    from kit.serving.after_import import install_as_sitecustomize
    install_as_sitecustomize(Path("kit/rehearsal/hooks.py"), site)   # site/sitecustomize.py + site/kit_after_import.py
"""

from __future__ import annotations

import importlib.abc
import os
import shutil
import sys
from collections.abc import Callable

COPY_NAME = "kit_after_import.py"  # this file's name beside a recorder copied as sitecustomize.py


class AfterImport(importlib.abc.MetaPathFinder):
    """Delegates finding to the rest of sys.meta_path; calls `after(module)` right after a `wanted` module executes.
    `tag` names the recorder, so that a second install of the same one is a no-op (`installed`)."""

    def __init__(self, tag: str, wanted: Callable[[str], bool], after: Callable) -> None:
        self.tag, self.wanted, self.after = tag, wanted, after

    def find_spec(self, fullname, path, target=None):
        if not self.wanted(fullname):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader, self.after)
                return spec
            if spec is not None:
                return spec
        return None


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, after: Callable) -> None:
        self.inner, self.after = inner, after

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        self.after(module)

    def __getattr__(self, name):  # get_source, is_package, ... of the real loader
        return getattr(self.inner, name)


def installed(tag: str) -> bool:
    return any(isinstance(f, AfterImport) and f.tag == tag for f in sys.meta_path)


def install(tag: str, wanted: Callable[[str], bool], after: Callable) -> bool:
    """Insert the finder first on sys.meta_path unless the recorder `tag` already has one; True when inserted."""
    if installed(tag):
        return False
    sys.meta_path.insert(0, AfterImport(tag, wanted, after))
    return True


def chain_next_sitecustomize(this_file: str) -> None:
    """Run the first other sitecustomize.py on sys.path (not the one in `this_file`'s folder), as Python would have."""
    here = os.path.dirname(os.path.abspath(this_file))
    for d in sys.path:
        f = os.path.join(d or ".", "sitecustomize.py")
        if os.path.abspath(d or ".") != here and os.path.isfile(f):
            with open(f) as fh:
                exec(compile(fh.read(), f, "exec"), {"__name__": "sitecustomize", "__file__": f})
            return


def install_as_sitecustomize(recorder_file, site) -> None:
    """Copy a recorder as `site/sitecustomize.py` and this file beside it (`COPY_NAME`), which the copy imports."""
    os.makedirs(site, exist_ok=True)
    shutil.copyfile(recorder_file, os.path.join(site, "sitecustomize.py"))
    shutil.copyfile(os.path.abspath(__file__), os.path.join(site, COPY_NAME))
