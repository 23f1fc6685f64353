"""What an offline bundle leaves out that its engine imports at start: a static walk of module-level imports.

Why: a bundle carries only what the GPU image lacks, and a check that imports the engine on a CPU host sees the
packages of the interpreter it runs in: a venv that already holds a package hides its absence (openai 3's httpx2
hid so), and a CPU host never takes the CUDA branches (`vllm_flash_attn`). Reading the source instead, this walk
starts at the modules on the engine's serving path, follows every import executed when a module loads (function
bodies, `if TYPE_CHECKING:` and `try: ... except ImportError` left out) into the engine and into every package the
bundle carries, and reports each top-level module that is neither carried, nor the standard library's, nor one the
image supplies (`Release.image`). An import under another `if` is reported apart: it runs only on some hosts.

    python -m kit.sglang.bundle install DIST/vllm-0.24.0-sm90-cp312.tar.xz --target SITE
    python bench/bundle_imports.py --site SITE --vllm-version 0.24.0

Prints one JSON line: {"modules_read", "absent": {module: first importer}, "absent_if": {...}}; exits 1 when
"absent" is not empty.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _run import emit  # noqa: E402

from kit.sglang.bundle import release_for  # noqa: E402

ENTRIES = {
    "vllm": [
        "vllm.entrypoints.cli.main", "vllm.entrypoints.cli.serve", "vllm.entrypoints.openai.api_server",
        "vllm.v1.engine.core", "vllm.v1.worker.gpu_worker", "vllm.v1.worker.gpu_model_runner",
        "vllm.model_executor.models.llama", "vllm.model_executor.models.llama_eagle3", "vllm.v1.spec_decode.eagle",
        "vllm.entrypoints.cli.benchmark.serve", "vllm.benchmarks.serve",
    ],
    "sglang": [
        "sglang.launch_server", "sglang.srt.entrypoints.http_server", "sglang.srt.managers.scheduler",
        "sglang.srt.models.llama", "sglang.srt.models.llama_eagle3", "sglang.bench_serving",
    ],
}  # fmt: skip
OPTIONAL = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def module_file(site: Path, name: str) -> Path | None:
    p = site.joinpath(*name.split("."))
    return next((f for f in (p / "__init__.py", p.with_suffix(".py")) if f.exists()), None)


def _guards_import(handlers: list[ast.ExceptHandler]) -> bool:
    names = set()
    for h in handlers:
        if h.type is None:
            return True
        names |= {ast.unparse(e).split(".")[-1] for e in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type])}
    return bool(names & OPTIONAL)


def load_time_imports(tree: ast.Module, name: str, package: bool) -> list[tuple[str, bool]]:
    """(imported module, under an `if`) for each import a module runs when it loads; `from a import b` also
    yields `a.b`, which is a module when b is one."""
    found: list[tuple[str, bool]] = []

    def visit(body: list[ast.stmt], cond: bool) -> None:
        for s in body:
            if isinstance(s, ast.Import):
                found.extend((a.name, cond) for a in s.names)
            elif isinstance(s, ast.ImportFrom):
                base = s.module
                if s.level:  # relative: a package's own name counts as its first level, a module's does not
                    parts = name.split(".")
                    base = ".".join(parts[: len(parts) - s.level + package] + ([s.module] if s.module else []))
                found.extend([(base, cond)] + [(f"{base}.{a.name}", cond) for a in s.names])
            elif isinstance(s, ast.If):
                if "TYPE_CHECKING" in ast.unparse(s.test):
                    visit(s.orelse, cond)
                else:
                    visit(s.body, True)
                    visit(s.orelse, True)
            elif isinstance(s, ast.Try):
                if not _guards_import(s.handlers):
                    visit(s.body, cond)
                visit(s.finalbody, cond)
            elif isinstance(s, ast.With):
                visit(s.body, cond)

    visit(tree.body, False)
    return found


def walk(site: Path, entries: list[str], image: set[str]) -> dict:
    carried = {p.name.split(".")[0] for p in site.iterdir() if not p.name.endswith(".dist-info")}
    plain = image | set(sys.stdlib_module_names) | {"__future__"}
    seen: dict[str, bool] = {}  # module -> reached only under an `if`
    read: set[str] = set()  # the modules among them that are files in the site
    queue = [(e, False) for e in entries]
    absent: dict[str, dict[str, str]] = {"absent": {}, "absent_if": {}}
    while queue:
        name, cond = queue.pop()
        if name in seen and (seen[name] <= cond):
            continue
        seen[name] = cond
        f = module_file(site, name)
        if f is None:
            continue
        read.add(name)
        for mod, under_if in load_time_imports(ast.parse(f.read_bytes()), name, f.name == "__init__.py"):
            top, c = mod.split(".")[0], cond or under_if
            if top in carried:
                parts = mod.split(".")
                queue += [(".".join(parts[:i]), c) for i in range(1, len(parts) + 1)]
            elif top not in plain:
                absent["absent_if" if c else "absent"].setdefault(top, name)
    for top in absent["absent"]:
        absent["absent_if"].pop(top, None)
    return {"modules_read": len(read), **absent}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--site", required=True, help="a bundle installed with `python -m kit.sglang.bundle install`")
    p.add_argument("--sglang-version", default="0.5.17")
    p.add_argument("--vllm-version", default=None)
    a = p.parse_args(argv)
    rel = release_for(a.sglang_version, a.vllm_version)
    doc = {"bundle": f"{rel.project}-{rel.version}", **walk(Path(a.site), ENTRIES[rel.project], set(rel.image))}
    emit(doc)
    return 1 if doc["absent"] else 0


if __name__ == "__main__":
    sys.exit(main())
