"""vLLM's EAGLE-3 support per release, derived from its wheel into `kit/vllm/rules.json` (read by `kit.vllm.rules`).

What: per final release from `FIRST_RELEASE` (the first with `llama_eagle3.py`), the fields of
`kit.vllm.rules.FIELDS` (one `derive_<field>` each) with file:line evidence, and `parser_flags` where `vllm serve`'s
own parser ran. Why: a vLLM deployment is judged by what *its* release does, and these facts change between releases.
How: the wheel's `.py` files read as text (AST or regex), never imported; rows equal in a field collapse into spans
of consecutive releases (`{"first", "last", "value", "evidence"}`, the evidence of the span's first release).

    python -m kit.derive.vllm_scan --write [V...]     # re-derive these releases (default: all listed), store the table
    python -m kit.derive.vllm_scan V                  # print release V's row
    VLLM_SRC=/dir python -m kit.derive.vllm_scan ...  # read /dir/<V>/vllm/... (extracted wheels), no download
    python -m kit.derive.vllm_scan --parser V SITE    # `vllm serve`'s real parser, vllm==V installed in SITE (folders
                                                      # joined by os.pathsep, its imports' packages too): parser_flags,
                                                      # stored as indices into one pool of actions (`parser_actions`)
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kit.derive import write_text
from kit.derive.flag_scan import DESCRIBE
from kit.findings import KitInputError
from kit.hf import AUX_IDS
from kit.sglang.versions import Version
from kit.vllm.rules import FIELDS, RELEASES_PATH, RULES_PATH

FIRST_RELEASE = "0.8.5"  # the first wheel with vllm/model_executor/models/llama_eagle3.py (0.8.4 has llama_eagle.py)
LAST_RELEASE = "0.34.0"
MODELS = "vllm/model_executor/models/"
SPEC_CONFIG_FILES = ("vllm/config/speculative.py", "vllm/config.py", "vllm/config/__init__.py")
ARG_UTILS = "vllm/engine/arg_utils.py"
LEGACY_FLAGS = ("--speculative-model", "--num-speculative-tokens", "--speculative-draft-tensor-parallel-size")
METRICS_FILES = ("vllm/v1/spec_decode/metrics.py", "vllm/v1/metrics/loggers.py")
SPECULATORS_DIR = "vllm/transformers_utils/configs/speculators/"
EAGLE_CONFIG = "vllm/transformers_utils/configs/eagle.py"
AUX_METHODS = ("set_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers")
DEFAULT_AUX = ("get_eagle3_default_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers")
DRAFT_TP = r"speculative_draft_tensor_parallel_size|self\.draft_tensor_parallel_size|draft_tp"
SPECULATORS_DETECT = r"def maybe_override_with_speculators|speculators_config"
# the EAGLE-3 config fields that decide which parameters a draft class builds (`draft_params`); `eagle_config.X`: X in
# the nested `eagle_config`
DRAFT_FIELDS = (
    "attention_bias",
    "fc_norm",
    "norm_before_fc",
    "num_aux_layers",
    "num_aux_hidden_states",
    AUX_IDS,
    f"eagle_config.{AUX_IDS}",
)
Ev = list  # [file, line, text]


class Source:
    """One release's unpacked wheel, its `.py` files (`vllm/...`) read as text; `lines` and `nodes` find in them."""

    def __init__(self, root: Path):
        self.root = root

    def text(self, path: str) -> str | None:
        return (self.root / path).read_text() if (self.root / path).is_file() else None

    def first(self, paths) -> tuple[str, str] | tuple[None, None]:
        """The first of `paths` the release has, with its text."""
        return next(((p, t) for p in paths if (t := self.text(p)) is not None), (None, None))

    def under(self, prefix: str) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in (self.root / prefix).rglob("*.py"))

    def lines(self, paths, rx: str) -> list[Ev]:
        """Every line of `paths` (in order) that `rx` finds, as evidence."""
        hits = ((p, i, l) for p in paths for i, l in enumerate((self.text(p) or "").splitlines(), 1))
        return [[p, i, l.strip()] for p, i, l in hits if re.search(rx, l)]

    def nodes(self, paths, *types) -> Iterator[tuple[str, str, Any]]:
        """(file, its text, node) of every AST node of `types` in `paths`, in order."""
        for p in paths:
            t = self.text(p) or ""
            yield from ((p, t, n) for n in _walk(ast.parse(t), *types))


@contextmanager
def open_source(version: str) -> Iterator[Source]:
    """$VLLM_SRC/<version>/ when there, else the wheel downloaded and unpacked into a temporary folder."""
    if (src := os.environ.get("VLLM_SRC")) and (Path(src) / version / "vllm").is_dir():
        yield Source(Path(src) / version)
        return
    with tempfile.TemporaryDirectory(prefix=f"vllm-{version}-") as tmp:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "-d", tmp]
        r = subprocess.run([*pip, f"vllm=={version}"], capture_output=True, text=True)
        if r.returncode or not (wheels := sorted(Path(tmp).glob("vllm-*.whl"))):
            last = (r.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise KitInputError(f"vllm=={version}: cannot download the wheel ({last})")
        with zipfile.ZipFile(wheels[0]) as zf:
            zf.extractall(tmp, [n for n in zf.namelist() if n.endswith(".py")])
        yield Source(Path(tmp))


_walk = lambda node, *types: [n for n in ast.walk(node) if isinstance(n, types)]
_ev = lambda path, node, text: [path, node.lineno, text.splitlines()[node.lineno - 1].strip()]  # evidence of a node
_strs = lambda node: [n.value for n in _walk(node, ast.Constant) if isinstance(n.value, str)]
_ret = lambda fn: next((n for n in _walk(fn, ast.Return) if n.value is not None), None)  # its first `return X`


_target = lambda n: n.target if isinstance(n, ast.AnnAssign) else n.targets[0] if isinstance(n, ast.Assign) else None
# (name, value) of each module-level `NAME = ...` / `NAME: T = ...`
_assigns = lambda tree: [(t.id, n.value) for n in tree.body if isinstance(t := _target(n), ast.Name) and n.value]
# a condition as a short rule: vLLM's long attribute chains named by what they are
_norm = lambda e: re.sub(DRAFT_TP, "draft_tp", re.sub(r"\w+\.tensor_parallel_size", "target_tp", e))


def _literal_values(tree: ast.Module, name: str, seen: set) -> list[str]:
    """The strings of a module-level `Name = Literal[...]` alias, nested aliases flattened."""
    seen.add(name)
    for value in (v for n, v in _assigns(tree) if n == name):
        out: list[str] = []
        for sub in ast.walk(value):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                out.append(sub.value)
            elif isinstance(sub, ast.Name) and sub.id not in ("Literal", "Union", *seen):
                out += _literal_values(tree, sub.id, seen)
        return out
    return []


def _method_in(tree: ast.AST, name: str) -> tuple[list[str], ast.AST | None]:
    """The strings of the `self.method in (...)` in def `name` (or an assignment to `name`), and that comparison."""
    named = lambda n: (
        getattr(n, "name", None) == name or any(getattr(t, "id", 0) == name for t in getattr(n, "targets", []))
    )
    is_in = lambda c: ast.unparse(c.left) == "self.method" and isinstance(c.ops[0], ast.In)
    hits = [c for n in _walk(tree, ast.FunctionDef, ast.Assign) if named(n) for c in _walk(n, ast.Compare) if is_in(c)]
    return (sorted(_strs(hits[0].comparators[0])), hits[0]) if hits else ([], None)


def derive_methods(src: Source) -> tuple[dict, dict]:
    path, text = src.first(SPEC_CONFIG_FILES)
    if text is None:
        return {"declared": []}, {}
    tree, ev, detect = ast.parse(text), {}, []  # detect: ("<substring> in draft model name", method it sets)
    declared = sorted(set(_literal_values(tree, "SpeculativeMethod", set())))
    compared: dict[str, Ev] = {}  # every string `self.method` is compared with: what the code really accepts
    for n in (c for c in _walk(tree, ast.Compare) if ast.unparse(c.left) == "self.method"):
        for s in _strs(n.comparators[0]):
            compared.setdefault(s, _ev(path, n, text))
    for n in (i for i in _walk(tree, ast.If) if ".model.lower()" in ast.unparse(i.test)):
        sets = [b.value for b in n.body if isinstance(b, ast.Assign) and ast.unparse(b.targets[0]) == "self.method"]
        if sets := [s.value for s in sets if isinstance(s, ast.Constant)]:
            detect.append([" or ".join(s for s in _strs(n.test) if s), sets[0]])
            ev.setdefault("name_detect", _ev(path, n, text))
    if not detect:  # 0.34.0 on: each method's config class `matches` the draft's name, in the detection order
        detect = _detected_by_class(src, ev)
    family, aux = _method_in(tree, "use_eagle"), _method_in(tree, "uses_aux_hidden_states")
    ev |= {k: _ev(path, c, text) for k, (_, c) in (("eagle_family", family), ("aux_hidden_state_methods", aux)) if c}
    if "eagle3" in compared:
        ev["eagle3_accepted"] = compared["eagle3"]
    if hits := src.lines([path], r"^\s*SpeculativeMethod\b.*="):
        ev["declared"] = hits[-1]
    accepted = sorted({*declared, *compared})
    eagle = {
        "eagle3": [m for m in accepted if m == "eagle3" or m.endswith("_eagle3")],
        "eagle": ["eagle"] * ("eagle" in accepted),
    }
    value = {"declared": declared, "undeclared_accepted": sorted(set(compared) - set(declared)), "name_detect": detect}
    return value | eagle | {"eagle_family": family[0], "aux_hidden_state_methods": aux[0]}, ev


def _detected_by_class(src: Source, ev: dict) -> list[list[str]]:
    """[substring of the draft's path, method] from the speculator config classes (v1/worker/gpu/spec_decode/*): a
    `matches` returning `"X" in ....model.lower()` in a class whose `base_method` is the method, in the order of
    `_CHECKPOINT_DETECTION_ORDER`."""
    files = src.under("vllm/v1/worker/gpu/spec_decode")
    order = next((_strs(n.value) for _, _, n in src.nodes(files, ast.Assign)
                  if ast.unparse(n.targets[0]) == "_CHECKPOINT_DETECTION_ORDER"), [])  # fmt: skip
    found = {}
    for path, text, cls in src.nodes(files, ast.ClassDef):
        base = [a.value.value for a in cls.body if isinstance(a, ast.Assign) and ast.unparse(a.targets[0]) == "base_method"
                and isinstance(a.value, ast.Constant)]  # fmt: skip
        fn = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "matches"), None)
        if base and fn and (r := _ret(fn)) and ".model.lower()" in ast.unparse(r.value):
            found.setdefault(base[0], [" or ".join(_strs(r.value)), base[0]])
            if base[0] == "eagle3":
                ev["name_detect"] = _ev(path, r, text)
    return [found[m] for m in order if m in found]


def derive_flags(src: Source) -> tuple[dict, dict]:
    calls: dict[str, ast.Call] = {}  # option -> its add_argument call
    text = src.text(ARG_UTILS) or ""
    for _, _, n in src.nodes([ARG_UTILS], ast.Call):
        if isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument":
            for a in (a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, str)):
                calls.setdefault(a, n) if a.startswith("-") else None
    spec = calls.get("--speculative-config")
    near = "\n".join(text.splitlines()[max(0, spec.lineno - 4) : spec.end_lineno]) if spec else ""  # `type` above
    spec_opts = sorted(o for o in calls if re.search(r"spec|draft", o))
    aliases = [a.value for a in (spec.args if spec else []) if isinstance(a, ast.Constant)]
    json_parsed = bool(spec) and ("json.loads" in near or "json" in ast.unparse(spec))
    value = {"speculative_config": spec is not None, "speculative_config_json": json_parsed, "spec_options": spec_opts}
    value |= {"speculative_config_aliases": sorted(a for a in aliases if a != "--speculative-config")}
    value |= {"legacy": {f: f in calls for f in LEGACY_FLAGS}}
    # the keys --speculative-config takes: SpeculativeConfig's fields (it is built as SpeculativeConfig(**json); any
    # other key stops startup)
    path, spec_text = src.first(SPEC_CONFIG_FILES)
    cls = [c for c in _walk(ast.parse(spec_text or ""), ast.ClassDef) if c.name == "SpeculativeConfig"][:1]
    fields = [a for c in cls for a in c.body if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)]
    value |= {"spec_keys": sorted(a.target.id for a in fields if not ast.unparse(a.annotation).startswith("ClassVar"))}
    ev = {o: _ev(ARG_UTILS, calls[o], text) for o in spec_opts}
    return value, ev | ({"spec_keys": _ev(path, cls[0], spec_text)} if cls else {})


def _registry(src: Source) -> dict[str, dict[str, tuple[str, str]]]:
    """registry.py's tables: {table name: {architecture: (module, class)}}."""
    out = {}
    for name, d in _assigns(ast.parse(src.text(MODELS + "registry.py") or "")):
        if isinstance(d, ast.Dict):
            pairs = [(k, v.elts[:2]) for k, v in zip(d.keys, d.values) if isinstance(v, ast.Tuple) and len(v.elts) >= 2]
            items = [(k, m, c) for k, (m, c) in pairs if all(isinstance(x, ast.Constant) for x in (k, m, c))]
            if rows := {k.value: (m.value, c.value) for k, m, c in items}:
                out[name] = rows
    return out


class _Classes:
    """Every class of vllm/model_executor/models/*.py: its bases, resolved by import or file, and its methods."""

    def __init__(self, src: Source):
        self.defs: dict[tuple[str, str], ast.ClassDef] = {}  # (module, class) -> its def
        self.imports: dict[str, dict[str, tuple[str, str]]] = {}  # module -> {name: (module, class)}
        for path in (p for p in src.under(MODELS) if "/" not in p[len(MODELS) :]):
            mod, imp = path[len(MODELS) : -3], {}
            try:
                tree = ast.parse(src.text(path) or "")
            except SyntaxError:
                continue
            self.imports[mod] = imp
            for n in _walk(tree, ast.ClassDef, ast.ImportFrom):
                if isinstance(n, ast.ClassDef):
                    self.defs.setdefault((mod, n.name), n)
                elif n.module:
                    base = n.module.removeprefix("vllm.model_executor.models.").lstrip(".")
                    imp.update({a.asname or a.name: (base, a.name) for a in n.names})

    def mro(self, mod: str, name: str, seen: set) -> list[tuple[str, ast.ClassDef, list[str]]]:
        """(module, ClassDef, base names) of the class and its bases, depth-first, bases in order."""
        key = (mod, name) if (mod, name) in self.defs else self.imports.get(mod, {}).get(name)
        if key not in self.defs or key in seen:
            return []
        seen.add(key)
        bases = [ast.unparse(b).split(".")[-1].split("[")[0] for b in self.defs[key].bases]
        return [(key[0], self.defs[key], bases)] + [x for b in bases for x in self.mro(key[0], b, seen)]

    def method(self, mod: str, name: str, meth: str) -> tuple[str, ast.FunctionDef] | None:
        """(defining module, def) of `meth` through the bases."""
        defs = ((m, f) for m, node, _ in self.mro(mod, name, set()) for f in node.body)
        return next(((m, f) for m, f in defs if isinstance(f, ast.FunctionDef) and f.name == meth), None)

    def supports_eagle3(self, mod: str, name: str) -> bool:
        aux = lambda node: any(isinstance(f, ast.FunctionDef) and f.name in AUX_METHODS for f in node.body)
        return any("SupportsEagle3" in bases or aux(node) for _, node, bases in self.mro(mod, name, set()))


def _formula(fn: ast.FunctionDef) -> str:
    """A layer-id method's rule as a short formula: the returned tuple, `num_layers` for the layer count."""
    out = ast.unparse(_ret(fn).value) if _ret(fn) else "?"
    return "delegates" if re.fullmatch(r"self\.[\w.()]+\.\w+\(\)", out) else out


def derive_aux_archs(src: Source) -> tuple[dict, dict]:
    classes, archs, rules, ev = _Classes(src), [], {}, {}
    for table, rows in sorted(_registry(src).items()):
        for arch, (mod, cls) in rows.items() if re.search(r"GENERATION|MULTIMODAL|TRANSFORMERS", table) else []:
            if classes.supports_eagle3(mod, cls):  # targets generate; drafts are in other tables
                archs.append(arch)
                hit = next((h for m in DEFAULT_AUX if (h := classes.method(mod, cls, m))), None)
                rules.setdefault(_formula(hit[1]) if hit else "interface default", set()).add(arch)
    # the interface's default, else Llama's (before the interface had one)
    fns = src.nodes((MODELS + "interfaces.py", MODELS + "llama.py"), ast.FunctionDef)
    path, text, fn = next(((p, t, f) for p, t, f in fns if f.name in DEFAULT_AUX and _ret(f)), (0, 0, None))
    default, ev = (_formula(fn), {"default": _ev(path, _ret(fn), text)}) if fn else (None, ev)
    if "interface default" in rules and default:
        rules.setdefault(default, set()).update(rules.pop("interface default"))
    # where the runner reads the draft config's ids (as points: the state entering that layer), else the default
    runner = ["vllm/v1/worker/gpu_model_runner.py"]
    if src.text(runner[0]) is None:  # the first runner is gone (0.34.0): the second is the only one
        runner = _v2_eagle_files(src)
    overrides = {f: sorted(a) for f, a in sorted(rules.items()) if f != default}
    value = {"archs": sorted(set(archs)), "default": default, "overrides": overrides}
    value |= {"ids_read": _ids_read(src, runner, ev, "ids_read")}
    return value | _v2_runner(src, ev), ev


_v2_eagle_files = lambda src: [f for f in src.under("vllm/v1/worker/gpu") if "eagle" in f]  # its EAGLE-3 helpers


def _ids_read(src: Source, files: list[str], ev: dict, key: str) -> list[str]:
    """Where `files` read a draft config's aux ids: "top" (`getattr(hf_config, ...)`), "nested" (`eagle_config`),
    each with its evidence as ev[f"{key}_{where}"]."""
    read = []
    for where, pattern in (("top", r"attr\(hf_config, .eagle_aux_hidden_state_layer_ids"),
                           ("nested", r"eagle_config\.get\(.eagle_aux_hidden_state_layer_ids")):  # fmt: skip
        if hits := src.lines(files, pattern):
            ev[f"{key}_{where}"] = hits[0]
            read.append(where)
    return read


def _v2_runner(src: Source, ev: dict) -> dict:
    """The second model runner (vllm/v1/worker/gpu/): whether VllmConfig's `use_v2_model_runner` picks it, as that
    property decides, and where its EAGLE-3 helper reads the draft config's ids; {} where the release has no such
    property. `v2_archs`: DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES (["*"]: none, the property ends in `return True`);
    `v2_steps`: the property's body as [condition, value] pairs, `if condition: return value` in order (its
    environment override left out: the kit reads VLLM_USE_V2_MODEL_RUNNER itself), each zero-argument `self._m()` it
    calls derived the same way into `v2_methods`, and `_get_v2_model_runner_unsupported_features` as
    [condition, feature] pairs (`v2_unsupported`); conditions are Python source over the config (`self.`, locals
    inlined, `target_listed`: the target's architecture is a default-V2 one), evaluated by `kit.vllm.runner`."""
    path = "vllm/config/vllm.py"
    fns = {n.name: n for _, _, n in src.nodes([path], ast.FunctionDef)}
    if "use_v2_model_runner" not in fns:
        return {}
    table = next((n for _, _, n in src.nodes([path], ast.Assign)
                  if any(getattr(x, "id", "") == "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES" for x in n.targets)), None)  # fmt: skip
    archs = sorted(_strs(table.value)) if table is not None else ["*"]
    ev["v2_archs"] = _ev(path, table if table is not None else fns["use_v2_model_runner"].body[-1], src.text(path))
    methods, todo = {}, ["use_v2_model_runner"]
    while todo:
        name = todo.pop()
        methods[name] = _steps(fns[name].body, {})
        called = {c.func.attr for c in _walk(fns[name], ast.Call) if isinstance(c.func, ast.Attribute)}
        todo += [m for m in called if m in fns and m not in methods and m != UNSUPPORTED and not fns[m].args.args[1:]]
    read = _ids_read(src, _v2_eagle_files(src), ev, "v2_ids_read")
    steps = methods.pop("use_v2_model_runner")
    unsupported = _appended(fns[UNSUPPORTED].body, {}, []) if UNSUPPORTED in fns else []
    return {"v2_archs": archs, "v2_ids_read": read, "v2_steps": steps, "v2_methods": methods} | (
        {"v2_unsupported": unsupported} if unsupported else {}
    )


UNSUPPORTED = "_get_v2_model_runner_unsupported_features"


class _Inline(ast.NodeTransformer):
    """Locals replaced by what they were assigned; `any(... for arch in architectures)` by `target_listed`."""

    def __init__(self, names: dict):
        self.names = names

    def visit_Name(self, node):
        return self.names.get(node.id, node)

    def visit_Call(self, node):
        if getattr(node.func, "id", "") == "any" and node.args and isinstance(node.args[0], ast.GeneratorExp):
            return ast.Name("target_listed")
        return self.generic_visit(node)


def _inline(node: ast.expr, names: dict) -> ast.expr:
    return _Inline(names).visit(copy.deepcopy(node))


def _steps(body: list[ast.stmt], names: dict) -> list[list[str]]:
    """A method body as [condition, value] pairs: each `if C: ... return V` in order, the final `return V` as
    ["True", V]; assignments inlined into what follows; a step reading `envs.` (the environment) left out."""
    out = []
    for st in body:
        if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
            names[st.targets[0].id] = _inline(st.value, names)
        elif isinstance(st, ast.If) and isinstance(st.body[-1], ast.Return) and not st.orelse:
            out.append([ast.unparse(_inline(st.test, names)), ast.unparse(_inline(st.body[-1].value, names))])
        elif isinstance(st, ast.Return) and st.value is not None:
            out.append(["True", ast.unparse(_inline(st.value, names))])
    return [s for s in out if "envs." not in s[0] + s[1]]


def _appended(body: list[ast.stmt], names: dict, conds: list[str]) -> list[list[str]]:
    """Each `unsupported.append(X)` in a body, with the conditions of the `if`s around it (elif: the earlier ones
    negated), as [condition, feature]."""
    out = []
    for st in body:
        if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
            names[st.targets[0].id] = _inline(st.value, names)
        elif isinstance(st, ast.If):
            test = ast.unparse(_inline(st.test, names))
            out += _appended(st.body, names, [*conds, test])
            out += _appended(st.orelse, names, [*conds, f"not ({test})"])
        elif (
            isinstance(st, ast.Expr)
            and isinstance(st.value, ast.Call)
            and getattr(st.value.func, "attr", "") == "append"
        ):
            cond = " and ".join(f"({c})" for c in conds) or "True"
            out.append([cond, ast.unparse(_inline(st.value.args[0], names))])
    return out


def _loader_ops(fn: ast.AST) -> list[dict]:
    """What one `load_weights` (or `hf_to_vllm_mapper`) does to checkpoint names, in source order: skip / rename /
    prefix / map / drop_if / require / skip_prefixes / stacked / skip_unknown, each with its condition and line ("at")."""
    ops: list[dict] = []
    add = lambda op, node: ops.append({**op, "at": node.lineno})
    # each node's nearest enclosing `if` (walk is breadth-first: an inner if overwrites its outer one)
    cond = {c: ast.unparse(i.test) for i in _walk(fn, ast.If) for c in ast.walk(i) if c is not i}.get
    for n in ast.walk(fn):
        kw, dict_kw = isinstance(n, ast.keyword), isinstance(getattr(n, "value", None), ast.Dict)
        if isinstance(n, ast.If) and len(n.body) == 1 and isinstance(n.body[0], ast.Continue) and _strs(n.test):
            add({"op": "skip", "if": ast.unparse(n.test)}, n)
        elif isinstance(n, ast.If) and isinstance(n.body[0], ast.Continue) and _unknown_name(n.test):
            add({"op": "skip_unknown"}, n)  # a name with no parameter is passed over, where others KeyError
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "replace":
            if len(a := n.args) == 2 and all(isinstance(x, ast.Constant) for x in a):
                add({"op": "rename", "from": a[0].value, "to": a[1].value, "if": cond(n)}, n)
        elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and isinstance(n.left, ast.Constant):
            if isinstance(n.left.value, str) and isinstance(n.right, ast.Name):
                add({"op": "prefix", "add": n.left.value, "if": cond(n)}, n)
        elif kw and n.arg in ("orig_to_new_substr", "orig_to_new_prefix") and dict_kw:
            for k, v in zip(n.value.keys, n.value.values, strict=True):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Constant):
                    add({"op": "map", "from": k.value, "to": v.value}, k)
        elif isinstance(n, ast.Assign) and isinstance(t := n.targets[0], ast.Subscript):
            if "orig_to_new" in ast.unparse(t.value) and isinstance(n.value, ast.Constant) and n.value.value is None:
                add({"op": "drop_if", "key": ast.literal_eval(t.slice), "if": cond(n)}, n)
        elif isinstance(n, ast.Raise) and n.exc is not None:
            add({"op": "require", "if": cond(n), "message": " ".join(_strs(n.exc))[:160]}, n)
        elif kw and n.arg == "skip_prefixes" and not (isinstance(n.value, ast.Constant) and n.value.value is None):
            add({"op": "skip_prefixes", "value": ast.unparse(n.value)}, n)
        elif isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "stacked_params_mapping":
            add({"op": "stacked", "value": [_strs(e)[:2] for e in getattr(n.value, "elts", [])]}, n)
        elif kw and n.arg == "orig_to_new_stacked" and dict_kw:
            pairs = [[_strs(v)[0], _strs(k)[0]] for k, v in zip(n.value.keys, n.value.values)]
            add({"op": "stacked", "value": pairs}, n)
    return sorted(ops, key=lambda o: o["at"])


def _unknown_name(test: ast.expr) -> bool:
    """`name not in params_dict` (a loader's test that a checkpoint name has no parameter)."""
    return isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.NotIn) and "params" in ast.unparse(test)


def derive_draft_archs(src: Source) -> tuple[dict, dict]:
    spec = _registry(src).get("_SPECULATIVE_DECODING_MODELS", {})
    archs = {a: f"{m}.{c}" for a, (m, c) in spec.items() if "eagle3" in m or "Eagle3" in c}
    classes, loaders, ev = _Classes(src), {}, {}
    is_load = lambda p: isinstance(p, ast.FunctionDef) and p.name == "load_weights"
    is_part = lambda p: is_load(p) or isinstance(p, ast.Assign) and "WeightsMapper(" in ast.unparse(p.value)
    for target in sorted(set(archs.values())):
        mod, cls = target.split(".")
        ops: list[dict] = []
        if (hit := classes.method(mod, cls, "load_weights")) and hit[0] == mod:
            ev[target] = _ev(MODELS + mod + ".py", hit[1], src.text(MODELS + mod + ".py"))
            # the draft class's loader, then its file's inner models' (`self.model.load_weights`), each with the
            # class-level `hf_to_vllm_mapper = WeightsMapper(...)` it applies (loaders first, then mappers)
            for (m, c), node in sorted(classes.defs.items(), key=lambda kv: kv[0][1] != cls):
                if m != mod or (c != cls and not c.endswith("Model")):
                    continue
                for part in sorted(
                    node.body, key=lambda p: not isinstance(p, ast.FunctionDef)
                ):  # loaders, then mappers
                    ops += [{**o, "in": c} if c != cls else o for o in _loader_ops(part)] if is_part(part) else []
        loaders[target] = {"ops": [{k: v for k, v in o.items() if k != "at"} for o in ops]}
        # its decoder model's own load_weights through AutoWeightsLoader (which ignores some unexpected keys), or not
        inner = [n for (m, c), n in classes.defs.items() if m == mod and c != cls and c.endswith("Model")]
        loaders[target]["inner_auto"] = any("AutoWeightsLoader(" in ast.unparse(n) for n in inner)
        # the EAGLE-3 config fields the class file reads (`getattr(config, F)`; the nested ids `eagle_config.get`):
        # a field it does not read builds nothing
        calls = [c for (m, _), node in classes.defs.items() if m == mod for c in _walk(node, ast.Call)]
        named = {"getattr": "", "eagle_config.get": "eagle_config."}  # the call -> the prefix of the field it reads
        reads = {named[f] + _strs(c)[0] for c in calls if (f := ast.unparse(c.func)) in named and _strs(c)}
        loaders[target]["reads"] = sorted(reads & set(DRAFT_FIELDS))
        # a decoder model that builds its own embedding only under a condition (0.9.0: pipeline parallelism): else a
        # checkpoint's embed_tokens has no parameter to go to
        if cond := _embed_condition(inner):
            loaders[target]["embed_if"] = cond
        if hit and hit[0] != mod:
            loaders[target]["inherits_load_weights"] = f"{hit[0]}.{cls}"
        ev[target + ":ops"] = [o["at"] for o in ops]
    rename, ev["rename"] = _eagle3_rename(src)
    override, ev["override"] = _draft_override(src)
    # the unexpected keys AutoWeightsLoader.load_weights lets pass unloaded (`ignore_unexpected_suffixes.append(...)`)
    fns = [f for _, _, f in src.nodes([MODELS + "utils.py"], ast.FunctionDef) if f.name == "load_weights"]
    calls = [c for f in fns for c in _walk(f, ast.Call) if "ignore_unexpected_suffixes.append" in ast.unparse(c.func)]
    ignores = sorted({a.value for c in calls for a in c.args if isinstance(a, ast.Constant)})
    if calls:
        ev["auto_ignores"] = _ev(MODELS + "utils.py", calls[0], src.text(MODELS + "utils.py"))
    value = {"archs": dict(sorted(archs.items())), "loaders": loaders, "rename": rename, "override": override}
    return value | ({"auto_ignores": ignores} if ignores else {}), ev


def _embed_condition(models: list[ast.ClassDef]) -> str | None:
    """The condition under which the draft's decoder model assigns `self.embed_tokens` in its __init__, as a rule of
    `pp` (the pipeline-parallel size); None where it always does (or never)."""
    assigns = lambda body: any(
        "self.embed_tokens" in ast.unparse(t) for a in body if isinstance(a, ast.Assign) for t in a.targets
    )
    inits = [f for m in models for f in m.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
    if not inits or any(assigns(f.body) for f in inits):
        return None
    conds = [ast.unparse(i.test) for f in inits for i in _walk(f, ast.If) if assigns(i.body)]
    return re.sub(r"get_pp_group\(\)\.world_size", "pp", conds[0]) if conds else None


def _draft_override(src: Source) -> tuple[dict[str, str], Ev | None]:
    """`SpeculativeConfig.hf_config_override`'s rewrite of any draft config's architecture by its model_type, before
    EAGLEConfig renames it (deepseek_v3 -> deepseek_mtp -> DeepSeekMTPModel): {model_type: architecture}."""
    path, text = src.first(SPEC_CONFIG_FILES)
    fns = [f for f in _walk(ast.parse(text or ""), ast.FunctionDef) if f.name == "hf_config_override"]
    renamed, archs = {}, {}  # model_type -> the model_type it becomes; model_type -> the architecture it is given
    for node in (n for n in (fns[0].body if fns else []) if isinstance(n, ast.If)):
        t = node.test  # only a test of the model_type alone: one with further conditions is passed over
        if not (isinstance(t, ast.Compare) and ast.unparse(t.left) == "hf_config.model_type" and len(t.ops) == 1):
            continue
        for st in node.body:
            if isinstance(st, ast.Assign) and ast.unparse(st.targets[0]) == "hf_config.model_type":
                renamed |= dict.fromkeys(_strs(node.test), st.value.value)
            elif "hf_config.update" in ast.unparse(st) and '"architectures"' in ast.unparse(st).replace("'", '"'):
                archs |= dict.fromkeys(_strs(node.test), _strs(st)[-1])
    out = {m: archs[renamed.get(m, m)] for m in sorted({*renamed, *archs}) if renamed.get(m, m) in archs}
    return out, _ev(path, fns[0], text) if out else None


def _eagle3_rename(src: Source) -> tuple[str | None, Ev | None]:
    """EAGLEConfig's rename of an EAGLE-3 draft's architectures (`kwargs["architectures"] = [... for arch in ...]`
    under `method == "eagle3"`) as a lambda of one architecture; None where the release names the class itself."""
    if not (text := src.text(EAGLE_CONFIG)):
        return None, None
    for node in _walk(ast.parse(text), ast.If):
        if "eagle3" not in _strs(node.test) or "method" not in ast.unparse(node.test):
            continue
        for a in node.body:
            if (
                isinstance(a, ast.Assign)
                and "architectures" in _strs(a.targets[0])
                and isinstance(a.value, ast.ListComp)
            ):
                return f"lambda {ast.unparse(a.value.generators[0].target)}: {ast.unparse(a.value.elt)}", _ev(
                    EAGLE_CONFIG, a, text
                )
    return None, None


def derive_draft_tp(src: Source) -> tuple[dict, dict]:
    value: dict[str, Any] = {"allowed": None, "default": None, "checks": []}
    ev: dict[str, Ev] = {}
    path, _ = src.first(SPEC_CONFIG_FILES)
    fns = [
        (t, f) for _, t, f in src.nodes([path] * bool(path), ast.FunctionDef) if f.name == "_verify_and_get_draft_tp"
    ]
    for text, c in ((t, c) for t, f in fns for c in ast.walk(f)):
        if isinstance(c, ast.Compare) and isinstance(c.ops[0], ast.NotIn):
            value["allowed"], ev["allowed"] = _norm(ast.unparse(c.comparators[0])), _ev(path, c, text)
        if isinstance(c, ast.If) and ast.unparse(c.test).endswith("is None") and value["default"] is None:
            assigns = [_norm(ast.unparse(b.value)) for b in _walk(c, ast.Assign)]
            value["default"], ev["default"] = " / ".join(dict.fromkeys(assigns)), _ev(path, c, text)
    for p, t, n in src.nodes(src.under("vllm/v1/spec_decode/"), ast.If):
        if re.search(r"draft_tp|tensor_parallel", ast.unparse(n.test)) and any(
            isinstance(b, ast.Raise) for b in n.body
        ):
            value["checks"].append({"if": _norm(ast.unparse(n.test)), "file": p})
            ev[f"check:{p}"] = _ev(p, n, t)
    return value, ev


def derive_speculators(src: Source) -> tuple[dict, dict]:
    ev: dict[str, Ev] = {}
    algos: dict[str, dict] = {}
    files = src.under(SPECULATORS_DIR)
    for p, t, n in src.nodes(files, ast.FunctionDef):
        for d in n.decorator_list:
            if isinstance(d, ast.Call) and ast.unparse(d.func) == "register_speculator" and d.args:
                is_map = lambda a: ast.unparse(a.targets[0]).endswith("arch_map") and isinstance(a.value, ast.Dict)
                archs = ([ast.literal_eval(a.value) for a in _walk(n, ast.Assign) if is_map(a)] or [{}])[-1]
                sets = re.findall(r'pre_trained_config\["architectures"\]\s*=\s*\["(\w+)"\]', ast.unparse(n))
                algos[d.args[0].value] = {"archs_by_model_type": archs} if archs else {"archs": sets}
                ev[d.args[0].value] = _ev(p, d, t)
    keys = [m.group(1) for p in files if (m := re.search(r'config_dict(?:\.get\(|\[)"(speculators_\w+)"', src.text(p)))]
    found = src.lines(("vllm/transformers_utils/config.py", ARG_UTILS), SPECULATORS_DETECT)
    ev |= {"detect": found[0]} if found else {}
    # `vllm serve DRAFT` with no speculative config: the engine args build one from the draft's config
    # (maybe_override_with_speculators, from 0.11.0), or create_speculative_config reads the config of the model as
    # given; where it reads the model config's model, which detection already turned into the verifier, it builds none
    # and the verifier is served without speculation (0.10.2; vllm-project/vllm PR #25250)
    builds = src.lines((ARG_UTILS,), r"maybe_override_with_speculators\(|self\.hf_config_path or self\.model\b")
    reads_verifier = src.lines((ARG_UTILS,), r"self\.hf_config_path or target_model_config\.model\b")
    ev |= {"builds": (builds or reads_verifier)[0]} if builds or reads_verifier else {}
    value = {"detects": bool(found and algos), "speculates": bool(found and algos and builds)}
    return value | {"type_key": (keys or [None])[-1], "algorithms": dict(sorted(algos.items()))}, ev


def derive_metrics(src: Source) -> tuple[dict, dict]:
    ev: dict[str, Ev] = {}
    declared: set[str] = set()
    for p, t, n in src.nodes(METRICS_FILES, ast.Constant):
        if isinstance(n.value, str) and re.fullmatch(r"vllm:spec_decode\w+", n.value):
            around = "\n".join(t.splitlines()[max(0, n.lineno - 4) : n.lineno + 1]).lower()
            counter = "counter" in around or "_total" in n.value
            declared.add(n.value)
            ev.setdefault(n.value.removesuffix("_total") + "_total" if counter else n.value, _ev(p, n, t))
    return {"declared": sorted(declared), "exposed": sorted(ev)}, ev


def derive(version: str) -> dict[str, dict]:
    """Release `version`'s row: {field: {"value": ..., "evidence": ...}}, read from its wheel."""
    with open_source(version) as src:
        if src.text(MODELS + "llama_eagle3.py") is None:
            raise KitInputError(f"vllm {version} has no EAGLE-3 draft class ({MODELS}llama_eagle3.py)")
        return {f: dict(zip(("value", "evidence"), globals()[f"derive_{f}"](src))) for f in FIELDS}


# `vllm serve`'s parser, built as `vllm` builds it (its serve subcommand's `subparser_init` on the CLI's subparsers:
# the options `make_arg_parser` adds, plus any the subcommand adds itself), each option described as the kit's flag
# tables store them (`kit.derive.flag_scan.DESCRIBE`), then the positionals (option_strings [], kind "positional").
# On vLLM's CPU platform throughout: VLLM_TARGET_DEVICE=cpu selects it from 0.28.0 on, a "+cpu" version (as a CPU
# build has) before; with no platform, 0.10.2 and 0.22.0 (among others) fail (DeviceConfig cannot infer a device),
# and 0.8.5.post1's --guided-decoding-backend choices differ.
# Run over this venv's torch and transformers: old releases register configs transformers now has (allowed here),
# and 0.17 asks torch for a function it has dropped (given here).
_PARSER_WORKER = (
    DESCRIBE
    + r"""
import importlib.metadata as md
_version = md.version
md.version = lambda name: _version(name) + ("+cpu" if name == "vllm" else "")
from transformers import AutoConfig  # releases up to ~0.9 register configs (aimv2) that transformers 5 now has
_register = AutoConfig.register
AutoConfig.register = lambda *a, **k: _register(*a, **{**k, "exist_ok": True})
import torch  # 0.17's CPU platform asks torch for AVX-512 the way torch < 2.13 answered
torch._C._cpu._is_avx512_supported = getattr(torch._C._cpu, "_is_avx512_supported", lambda: True)
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
from vllm.entrypoints.cli.serve import cmd_init
serve = next(c for c in cmd_init() if c.name == "serve")
parser = serve.subparser_init(FlexibleArgumentParser(prog="vllm").add_subparsers(dest="subparser"))
positionals = [{"option_strings": [], "dest": a.dest, "kind": "positional", "nargs": a.nargs,
                "type": type_name(a.type), "choices": choices_of(a), "default": jsonable(a.default), "const": None,
                "required": bool(a.required), "new_flag": None} for a in parser._actions if not a.option_strings]
print(json.dumps(describe(parser) + positionals))
"""
)


def parser_flags(version: str, site: str) -> list[dict]:
    """Every option of `vllm serve`'s parser, run here with `site` (folders joined with os.pathsep) as PYTHONPATH:
    vllm==version `pip install --no-deps --target`ed there, beside the pure-Python packages its imports need (for
    0.33.0: cbor2 openai-harmony openai cloudpickle pybase64 cachetools uvloop py-cpuinfo xgrammar apache-tvm-ffi
    partial-json-parser llguidance watchfiles)."""
    env = {**os.environ, "PYTHONPATH": site, "VLLM_TARGET_DEVICE": "cpu"}
    r = subprocess.run([sys.executable, "-c", _PARSER_WORKER], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode:
        raise KitInputError(f"vllm {version}'s parser did not run: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def spans(rows: dict[str, dict], order: list[str]) -> list[dict]:
    """Releases adjacent in `order` with equal values as one span, the first release's evidence kept."""
    out: list[dict] = []
    for v in sorted(rows, key=Version.parse):
        if out and out[-1]["value"] == rows[v]["value"] and order.index(v) == order.index(out[-1]["last"]) + 1:
            out[-1]["last"] = v
        else:
            out.append({"first": v, "last": v, "value": rows[v]["value"], "evidence": rows[v].get("evidence", {})})
    return out


_listed = lambda: json.loads(RELEASES_PATH.read_text())["releases"] if RELEASES_PATH.exists() else []


def listed_releases() -> list[str]:
    """Every final vLLM release (post releases included) from FIRST_RELEASE through LAST_RELEASE on the index."""
    r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "vllm"], capture_output=True, text=True)
    if not (m := re.search(r"Available versions: (.*)", r.stdout)):
        raise KitInputError(f"pip index versions vllm: {r.stderr.strip()[-200:]}")
    finals = [v for v in m.group(1).split(", ") if not re.search(r"(a|b|rc|dev)\d*$", v)]
    in_range = lambda v: Version.parse(FIRST_RELEASE) <= Version.parse(v) <= Version.parse(LAST_RELEASE)
    return sorted(filter(in_range, finals), key=Version.parse)


def stored_rows() -> dict[str, dict[str, dict]]:
    """{field: {release: {"value", "evidence"}}} of the stored table, spans expanded (parser_flags: action dicts)."""
    doc, at = json.loads(RULES_PATH.read_text()) if RULES_PATH.exists() else {"fields": {}}, _listed()
    pool = doc.get("parser_actions", [])
    releases = lambda s: at[at.index(s["first"]) : at.index(s["last"]) + 1]
    value = lambda f, s: [pool[i] for i in s["value"]] if f == "parser_flags" else s["value"]
    cells = lambda f, ss: {v: {"value": value(f, s), "evidence": s["evidence"]} for s in ss for v in releases(s)}
    return {f: cells(f, ss) for f, ss in doc["fields"].items()}


def write(rows: dict[str, dict[str, dict]], releases: list[str]) -> None:
    """Store `rows` ({release: {field: {"value", "evidence"}}}) over the stored table, and the release list;
    parser_flags as indices into one pool of distinct actions ("parser_actions")."""
    doc = {
        "_doc": "every final vLLM release from EAGLE-3's first (llama_eagle3.py) through "
        f"{LAST_RELEASE}, from `pip index versions vllm`; written by `python -m kit.derive.vllm_scan --write`",
        "releases": releases,
    }
    write_text(RELEASES_PATH, json.dumps(doc, indent=1) + "\n")
    table = stored_rows()
    for v, f, cell in ((v, f, cell) for v, row in rows.items() for f, cell in row.items()):
        table.setdefault(f, {})[v] = cell
    index: dict[str, int] = {}  # an action's JSON -> its place in the pool
    for v in sorted(table.get("parser_flags", {}), key=Version.parse):
        cell = table["parser_flags"][v]
        cell["value"] = [index.setdefault(json.dumps(a, sort_keys=True), len(index)) for a in cell["value"]]
    doc = {
        "_doc": "generated by `python -m kit.derive.vllm_scan --write [V...]` from real vllm wheels (read as text, "
        "never imported): per field, spans of consecutive releases with equal values, each with file:line "
        "evidence [file, line, text] from the span's first release; parser_flags (`--parser V SITE`: `vllm serve`'s "
        "parser run) names its actions by index into `parser_actions`; read by kit.vllm.rules, checked by "
        "kit/tests/vllm/test_rules.py",
        "fields": {f: spans(table[f], releases) for f in (*FIELDS, "parser_flags") if table.get(f)},
        "parser_actions": "@POOL@",
    }
    text = json.dumps(doc, indent=1, sort_keys=True)
    ids = r'"value": \[\s+(\d+(?:,\s+\d+)*)\s+\]'  # parser_flags' indices on one line
    text = re.sub(ids, lambda m: '"value": [' + re.sub(r"\s", "", m[1]) + "]", text)
    pool = ",\n  ".join(json.dumps(json.loads(k), sort_keys=True, separators=(",", ":")) for k in index)
    write_text(RULES_PATH, text.replace('"@POOL@"', f"[\n  {pool}\n ]" if index else "[]") + "\n")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--parser"]:
        how = f"`vllm serve`'s subparser_init run with vllm=={argv[1]} installed --no-deps"
        write({argv[1]: {"parser_flags": {"value": parser_flags(*argv[1:3]), "evidence": {"how": how}}}}, _listed())
    elif argv[:1] == ["--write"]:
        try:  # the stored list, and any release the package index adds to it
            releases = sorted({*_listed(), *listed_releases()}, key=Version.parse)
        except KitInputError as e:  # offline (VLLM_SRC): the stored list
            print(f"the package index was not read ({e}): the stored release list stands", file=sys.stderr)
            releases = _listed()
        rows = {}
        for v in argv[1:] or releases:
            rows[v] = derive(v)
            print(v, "derived", flush=True)
        write(rows, releases)
    else:
        for v in argv or [LAST_RELEASE]:
            print(json.dumps({f: c["value"] for f, c in derive(v).items()}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
