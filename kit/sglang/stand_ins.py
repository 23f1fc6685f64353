"""Stand-ins for modules SGLang imports on the way to its argument parser that cannot be installed on a CPU.

No CPU build of torchvision exists for the kit's CPU torch (the CUDA builds fail to load: "operator
torchvision::nms does not exist"), yet SGLang 0.5.17 imports it at module level for image helpers the parser never
calls. `kit.venvs` copies this file into every SGLang side environment as `kit_stand_ins.py`, with a `.pth` line
that calls `install()` (the kit never imports it): each name in STAND_INS that is *not* installed then imports as
an inert module tree of inert classes. A mock, only because nothing real can run here; a real torchvision wins.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

STAND_INS = ("torchvision",)


class _Inert(type):
    def __new__(mcs, name, bases, ns, **kwargs):  # class options (`frozen=True`) of a subclass are dropped
        return super().__new__(mcs, name, bases, ns)

    def __init__(cls, name, bases, ns, **kwargs):
        super().__init__(name, bases, ns)

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(name, (), {"_kit_inert": True})

    def __call__(cls, *args, **kwargs):
        if cls.__dict__.get("_kit_inert"):
            return cls
        # a real class deriving from a stand-in: an instance, set up by its own __init__ or from the keywords
        obj = object.__new__(cls)
        init = next((c.__dict__["__init__"] for c in cls.__mro__[:-1] if "__init__" in c.__dict__), None)
        if init is not None:
            init(obj, *args, **kwargs)
        else:
            obj.__dict__.update(kwargs)
        return obj

    def __iter__(cls):
        return iter(())

    def __or__(cls, other):
        return cls


class _InertModule(types.ModuleType):
    __getattr__ = _Inert.__getattr__


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = set(roots)

    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _InertModule(spec.name)
        m.__path__ = []
        m.__version__ = "0.0+kit.stand.in"
        return m

    def exec_module(self, module):
        pass


def install_named(roots) -> None:
    """Stand in for these top-level modules (the ones a release's wheel source imports without guarding that
    this interpreter lacks: kit.derive.flag_scan.derive_from_source names them one failed import at a time)."""
    sys.meta_path.append(_Finder(roots))


def install():
    missing = [m for m in STAND_INS if importlib.util.find_spec(m) is None]
    if missing:
        install_named(missing)
