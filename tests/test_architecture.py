"""The package's shape, checked: one-way dependencies, no import cycles, no silent guards, a true map, ruff clean.

Layers, lowest first (a module may import its own layer or lower ones, never higher):
    base (kit.findings, kit.codes, kit.config, kit.hf, kit.models, kit.prompts, kit.venvs: the side environments real
    third-party code runs in, each built from the recipe its caller gives)
    kit.sglang -> kit.vllm (what each vLLM release does; kit.vllm.checks sits in kit.serving's layer)
    -> kit.derive (the scanners; kit.sglang.releases, whose --derive runs them, sits in this layer)
    -> kit.env -> kit.checkpoint -> kit.reference -> kit.wiring -> kit.serving -> kit.refserver -> kit.rehearsal
    -> kit.measure -> kit.tune
    top (kit.cli, kit.doctor, kit.preflight, kit.launch_verb, kit.rehearse, kit.demo, kit.summary, kit.__main__)

The core (what the notebooks' story needs) never imports a side room (SIDE_ROOMS: the scanners, the reference
server, the rehearsal, the server capture, the GPU bundle's builder, the GPU demo and its CUDA-graph timing, the
draft trainer); only the entry modules that dispatch a verb to one (ENTRY) may.

Run: python -m pytest tests/test_architecture.py
"""

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [
    "sglang",
    "vllm",
    "derive",
    "env",
    "checkpoint",
    "reference",
    "wiring",
    "serving",
    "refserver",
    "rehearsal",
    "measure",
    "tune",
]
BASE = {"kit", "kit.findings", "kit.codes", "kit.config", "kit.hf", "kit.models", "kit.prompts", "kit.venvs"}
# a module placed in another package's layer (kit.vllm.checks raises the wiring's shared codes)
SAME_AS: dict[str, str] = {"kit.sglang.releases": "kit.derive", "kit.vllm.checks": "kit.serving"}
# the side rooms: machinery beside the notebooks' story (a package, or a module with its submodules)
SIDE_ROOMS = {
    "kit.derive": "the maintainer's scanners that derive kit.sglang's tables from each release's wheel",
    "kit.sglang.releases": "the release list's upkeep: --refresh asks the package index, --derive runs the scanners",
    "kit.refserver": "the CPU reference server (`kit serve`)",
    "kit.rehearsal": "the rehearsal in miniature and its recorder (`kit rehearse`)",
    "kit.measure.capture": "the server capture (`kit launch --capture-hidden`)",
    "kit.serving.capture_hook": "the server capture's recorder, copied into SGLang's interpreter",
    "kit.sglang.bundle": "the offline SGLang bundle's builder and installer (`kit bundle`)",
    "kit.demo_gpu": "the main job on real SGLang (`kit demo --gpu`)",
    "kit.reference.graphs": "the reference step and greedy decoding in CUDA graphs, for GPU timing (`kit demo --gpu`)",
    "kit.reference.train": "the draft trainer on this machine (`kit train-draft`, the notebooks' `train_draft=True`)",
    "kit.tune": "the speculative parameters that pay per batch size, predicted then measured (`kit tune`)",
    "kit.codes": "the finding codes collected from their declarations, docs/findings.md written (`python -m kit.codes`)",
    "kit.serving.after_import": "the import hook both server recorders stand on, copied beside each",
}
# the entry modules that dispatch a verb to a side room: the only non-side modules that may import one
ENTRY = {"kit.cli", "kit.__main__", "kit.demo", "kit.launch_verb", "kit.rehearse"}


def modules() -> dict[str, Path]:
    out = {}
    for f in sorted((ROOT / "kit").rglob("*.py")):
        rel = f.relative_to(ROOT)
        if "tests" in rel.parts:
            continue
        name = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        out[name] = f
    return out


def kit_imports(path: Path, mods: dict[str, Path]) -> set[str]:
    """Every kit module `path` imports, at module level or inside functions."""
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("kit") and n.level == 0:
            if n.module in mods and n.module != "kit":
                out.add(n.module)
            out |= {f"{n.module}.{a.name}" for a in n.names if f"{n.module}.{a.name}" in mods}
        elif isinstance(n, ast.Import):
            out |= {a.name for a in n.names if a.name in mods}
    return out


def layer(name: str) -> int:
    parts = SAME_AS.get(name, name).split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return -1 if name in BASE else len(LAYERS)


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: kit_imports(p, mods) - {m} for m, p in mods.items()}


def test_dependencies_point_one_way():
    bad = [f"{m} -> {d}" for m, ds in graph().items() for d in ds if layer(d) > layer(m)]
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_no_import_cycles():
    g, state, stack, cycles = graph(), {}, [], []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(g.get(u, ())):
            if state.get(v) == 1:
                cycles.append(" -> ".join(stack[stack.index(v) :] + [v]))
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def side_room(name: str) -> str | None:
    return next((r for r in SIDE_ROOMS if name == r or name.startswith(r + ".")), None)


def core_into_side_rooms(g: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} -> {d} ({SIDE_ROOMS[side_room(d)]})"
        for m, ds in g.items()
        if side_room(m) is None and m not in ENTRY
        for d in ds
        if side_room(d) is not None
    )


def test_the_core_never_imports_a_side_room(tmp_path):
    """The notebooks' story (every module but the side rooms and the entry modules) imports no side room, at
    module level or inside a function: what both need lives in the core (`kit.sglang.bundle_site`,
    `kit.serving.launch.Change`), and the side room imports it from there."""
    mods = modules()
    assert all(any(m == r or m.startswith(r + ".") for m in mods) for r in SIDE_ROOMS), "a side room moved: update"
    assert ENTRY <= set(mods), ENTRY - set(mods)
    bad = core_into_side_rooms(graph())
    assert not bad, "the core imports a side room (move the shared fact into the core):\n" + "\n".join(bad)
    # the check sees an import inside a function of a core module
    probe = tmp_path / "probe.py"
    probe.write_text('"""probe"""\n\n\ndef f():\n    from kit.rehearsal.runner import plan_rehearsal\n')
    assert core_into_side_rooms({"kit.measure.probe": kit_imports(probe, mods)}) == [
        f"kit.measure.probe -> kit.rehearsal.runner ({SIDE_ROOMS['kit.rehearsal']})"
    ]


def test_runtime_never_imports_checks():
    """Checks (`*.checks`, doctor) judge runtime facts; runtime modules must not depend on them."""
    verbs = {"kit.launch_verb", "kit.doctor", "kit.demo", "kit.cli"}
    bad = [
        f"{m} -> {d}"
        for m, ds in graph().items()
        for d in ds
        if d.endswith(".checks") and not m.endswith(".checks") and m not in verbs and not m.startswith("kit.measure")
    ]
    assert not bad, "runtime code importing checks:\n" + "\n".join(bad)


def test_no_silent_guard_around_kit_imports():
    """An ImportError inside the kit is a bug: no try/except around `import kit...`."""
    bad = []
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Try):
                continue
            guarded = [
                n
                for stmt in node.body
                for n in ast.walk(stmt)
                if isinstance(n, (ast.Import, ast.ImportFrom))
                and (getattr(n, "module", None) or "").startswith("kit")
                or isinstance(n, ast.Import)
                and any(a.name.startswith("kit") for a in n.names)
            ]
            catches_import = any(
                h.type is None or "ImportError" in ast.unparse(h.type) or "Exception" in ast.unparse(h.type)
                for h in node.handlers
            )
            if guarded and catches_import:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "kit imports inside try/except:\n" + "\n".join(bad)


def test_every_module_has_a_docstring():
    missing = [str(p.relative_to(ROOT)) for p in modules().values() if not ast.get_docstring(ast.parse(p.read_text()))]
    assert not missing, f"modules without a docstring: {missing}"


def test_architecture_doc_names_every_module():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`(kit(?:\.\w+)+)`", doc))
    missing = [m for m in modules() if m != "kit" and m not in named]
    assert not missing, f"docs/architecture.md does not name: {missing}"
    # a name may be a module or an attribute of one (`kit.sglang.params.resolve`)
    stale = [n for n in named if n not in modules() and n.rsplit(".", 1)[0] not in modules()]
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"


def test_default_release_written_once():
    """The default SGLang release is one constant (kit.sglang.versions.DEFAULT_RELEASE), not a literal."""
    hits = []
    for name, path in modules().items():
        if name == "kit.sglang.versions":
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Constant) and n.value == "0.5.23":
                hits.append(f"{path.relative_to(ROOT)}:{n.lineno}")
    assert not hits, "the default release written as a literal:\n" + "\n".join(hits)


def test_no_branching_on_engine_names():
    """What differs between serving engines is asked of the engine object (`kit.serving.engines`): no module
    compares an engine's name with a string (`engine == "reference"`)."""

    def names_engine(node) -> bool:
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        return name == "engine" or name.endswith("_engine")

    hits = []
    for name, path in modules().items():
        if name.startswith("kit.serving.engines"):
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Compare):
                sides = [n.left, *n.comparators]
                if any(names_engine(s) for s in sides) and any(
                    isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides
                ):
                    hits.append(f"{path.relative_to(ROOT)}:{n.lineno}: {ast.unparse(n)}")
    assert not hits, "branching on engine names (ask the engine object instead):\n" + "\n".join(hits)


# a parameter named like a parsed config.json (config, cfg, conf, raw, hf, target_config, draft_cfg...)
CONFIG_PARAM = re.compile(r"^(?:config|cfg|conf|raw|hf|\w+_config|\w+_cfg)$")
# a dict in an annotation: dict, dict[...], Mapping[...]
UNTYPED = re.compile(r"\b(?:dict|Dict|Mapping|MutableMapping)\b")


def test_configs_travel_typed():
    """No public function takes a parsed config.json as a dict: it takes `kit.hf.HFConfig` (the parsed file
    and its path) or the typed facts read from it (`DraftConfig`, `TargetFacts`). `HFConfig.of`, the one
    place a dict becomes an HFConfig, is the exception."""
    hits = []
    for name, path in modules().items():
        for n in ast.walk(ast.parse(path.read_text())):
            if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) or n.name.startswith("_"):
                continue
            if name == "kit.hf" and n.name == "of":
                continue
            a = n.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                ann = ast.unparse(arg.annotation) if arg.annotation else ""
                if CONFIG_PARAM.match(arg.arg) and UNTYPED.search(ann):
                    hits.append(f"{path.relative_to(ROOT)}:{n.lineno}: {n.name}({arg.arg}: {ann})")
    assert not hits, "configs passed as dicts (take kit.hf.HFConfig or DraftConfig/TargetFacts):\n" + "\n".join(hits)


def test_release_numbers_only_in_kit_sglang():
    """What a release does is knowledge of `kit.sglang` (versioned there, derived by `kit.derive`'s scanners); no
    other package names a release:
    neither a 0.4.x/0.5.x literal nor any release the recorded tables hold (kit.sglang.loader.known_versions).
    A finding code's declaration (`NAME = Code(...)`: its meaning and typical fix, the text docs/findings.md shows)
    is documentation and may name releases."""
    from kit.sglang.loader import known_versions

    def declarations(path: Path) -> set[int]:
        tree = ast.parse(path.read_text())
        spans = [n for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)]
        spans = [n for n in spans if ast.unparse(n.value.func) == "Code"]
        return {i for n in spans for i in range(n.lineno, n.end_lineno + 1)}

    recorded = "|".join(re.escape(v) for v in sorted(known_versions(), key=len, reverse=True))
    release = re.compile(rf"(?<![\w.])(?:0\.[45]\.\d+(?:\.post\d+)?|{recorded})(?![\w.]*\d)")
    hits = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()[:100]}"
        for name, path in modules().items()
        if not name.startswith(("kit.sglang", "kit.derive"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if release.search(line) and i not in declarations(path)
    ]
    assert not hits, "SGLang release numbers outside kit/sglang (move the fact there):\n" + "\n".join(hits)


def test_ruff_clean():
    """ruff is pinned in requirements.txt (the README's setup installs it): missing, this fails, never skips."""
    assert importlib.util.find_spec("ruff"), "ruff is not installed: pip install -r requirements.txt pins it"
    for args in (["check", "kit", "tests", "bench"], ["format", "--check", "kit", "tests", "bench"]):
        r = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, f"ruff {' '.join(args)}:\n{r.stdout[-3000:]}{r.stderr[-1000:]}"
