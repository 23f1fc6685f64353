"""Serving engines behind one seam: a registry of protocol objects (`kit.serving.engines.base.Engine`).

The launcher, the process lifecycle, the log parser, the benchmark client and its metrics ask the engine object for
everything engine-specific; none of them branches on an engine's name. Registered: `sglang` (real SGLang on a GPU
host), `vllm` (`vllm serve` on a GPU host) and `reference` (the kit's CPU reference server); another engine is one
module with an `Engine` subclass and one `register(...)` call (docs/architecture.md, "How to add a serving engine").

    engine = get_engine("reference")
    argv = engine.argv(spec)            # [python, -m, kit, serve, --speculative-..., ...]
    resolve_engine("auto")              # the first registered engine that serves here: SGLang or vLLM on a GPU, else reference
"""

from __future__ import annotations

from kit.findings import KitInputError
from kit.serving.engines.base import Engine, missing_interface
from kit.serving.engines.reference import REFERENCE_FIELDS, ReferenceServer
from kit.serving.engines.sglang import SGLANG_MODULE, SGLang
from kit.serving.engines.vllm import VllmEngine

__all__ = ["ENGINES", "Engine", "REFERENCE_FIELDS", "SGLANG_MODULE", "get_engine", "register", "resolve_engine"]

ENGINES: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    """Make `engine` answer to its name (`--engine NAME`, `get_engine(NAME)`); returns it. An engine without a name,
    or whose class leaves a required protocol method undefined, is refused here, not at its first launch."""
    if not isinstance(engine, Engine):
        raise TypeError(f"{type(engine).__name__}: a serving engine subclasses kit.serving.engines.base.Engine")
    if not engine.name:
        raise ValueError(f"{type(engine).__name__}: a serving engine needs a name")
    missing = missing_interface(engine)
    if missing:
        raise TypeError(
            f"serving engine {engine.name!r} ({type(engine).__name__}) does not define {', '.join(missing)}"
        )
    ENGINES[engine.name] = engine
    return engine


register(SGLang())
register(VllmEngine())  # before the reference server: `auto` takes vLLM on a GPU host that has it and no SGLang
register(ReferenceServer())


def get_engine(name: str | Engine | None = None) -> Engine:
    """The registered engine of that name (an Engine passes through; None: SGLang)."""
    if isinstance(name, Engine):
        return name
    try:
        return ENGINES[name or "sglang"]
    except KeyError:
        raise KitInputError(f"--engine {name!r}: unknown serving engine; choose from {', '.join(ENGINES)}")


def resolve_engine(name: str) -> str:
    """`auto`: the first registered engine that serves on this machine; any other name is checked and returned."""
    if name == "auto":
        return next(e.name for e in ENGINES.values() if e.serves_here())
    return get_engine(name).name
