"""vLLM's EAGLE-3 support per release, derived from each release's wheel (`kit/vllm/rules.json`, read by `kit.vllm.rules`).

What: for every final vLLM release from EAGLE-3's first (`FIRST_RELEASE`, the first wheel with
`vllm/model_executor/models/llama_eagle3.py`) one row of eight fields, each with its file:line evidence:
`methods` (the `method` values `--speculative-config` declares and accepts, which mean EAGLE-3 / EAGLE, the names
a draft path auto-detects), `flags` (`--speculative-config` and its JSON parsing, the legacy speculative flags, every
option naming spec/draft), `aux_archs` (the registered architectures whose class supports EAGLE-3 aux hidden states,
the default aux layer-id formula and its overrides), `draft_archs` (the architectures routed to an EAGLE-3 draft
class, and what each class's `load_weights` does to checkpoint names), `draft_tp` (how the draft's tensor-parallel
size is checked), `speculators` (speculators-format config detection and the algorithms it accepts), `metrics` (the
Prometheus spec-decode counters of the V1 engine, as exposed) and, where vLLM's own parser ran, `parser_flags`.

Why: a vLLM deployment of an EAGLE-3 draft is judged by what *its* release does, and vLLM changes these facts
between releases (methods added, draft classes renamed, loaders rewritten); the facts are read from the real source
so a change in vLLM shows up as a new span here, not as a wrong answer.

How: each wheel (`pip download --no-deps --only-binary=:all: vllm==V`, ~330 MB) is read as a zip, only the `.py`
members a field needs, as text (AST where it helps, regexes where robust), never imported, then deleted. Rows equal
in a field collapse into spans of consecutive releases (`{"first", "last", "value", "evidence"}`; the evidence is the
span's first release's file:line).

    python -m kit.derive.vllm_scan --write [V...]     # re-derive these releases (default: all listed), store the table
    python -m kit.derive.vllm_scan V                  # print release V's row
    VLLM_SRC=/dir python -m kit.derive.vllm_scan ...  # read /dir/<V>/vllm/... (extracted wheels) instead of downloading
    python -m kit.derive.vllm_scan --parser V SITE    # vLLM's real parser, vllm==V installed in SITE (parser_flags)
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kit.derive import write_text
from kit.findings import KitInputError
from kit.sglang.versions import Version
from kit.vllm.rules import FIELDS, RELEASES_PATH, RULES_PATH

FIRST_RELEASE = "0.8.5"  # the first wheel with vllm/model_executor/models/llama_eagle3.py (0.8.4 has llama_eagle.py)
LAST_RELEASE = "0.33.0"
MODELS = "vllm/model_executor/models/"
SPEC_CONFIG_FILES = ("vllm/config/speculative.py", "vllm/config.py", "vllm/config/__init__.py")
ARG_UTILS = "vllm/engine/arg_utils.py"
LEGACY_FLAGS = ("--speculative-model", "--num-speculative-tokens", "--speculative-draft-tensor-parallel-size")
METRICS_FILES = ("vllm/v1/spec_decode/metrics.py", "vllm/v1/metrics/loggers.py")
SPECULATORS_DIR = "vllm/transformers_utils/configs/speculators/"
AUX_METHODS = ("set_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers")
DEFAULT_AUX = ("get_eagle3_default_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers")
Ev = list  # [file, line, text]


# -- the wheel, read as text ------------------------------------------------------------------------------------
class Source:
    """The `.py` members of one release's wheel (or an extracted tree), read as text on demand."""

    def __init__(self, version: str, zf: zipfile.ZipFile | None = None, root: Path | None = None):
        self.version, self._zf, self._root, self._cache = version, zf, root, {}
        names = zf.namelist() if zf else [str(p.relative_to(root)) for p in root.rglob("*.py")]  # type: ignore[union-attr]
        self.names = sorted(n for n in names if n.endswith(".py"))

    def text(self, path: str) -> str | None:
        if path not in self._cache:
            if path not in self.names:
                self._cache[path] = None
            elif self._zf:
                self._cache[path] = self._zf.read(path).decode()
            else:
                self._cache[path] = (self._root / path).read_text()  # type: ignore[operator]
        return self._cache[path]

    def first(self, paths) -> tuple[str, str] | tuple[None, None]:
        """The first of `paths` the release has, with its text."""
        for p in paths:
            if (t := self.text(p)) is not None:
                return p, t
        return None, None

    def under(self, prefix: str) -> list[str]:
        return [n for n in self.names if n.startswith(prefix)]


@contextmanager
def open_source(version: str) -> Iterator[Source]:
    """Release `version`'s source: $VLLM_SRC/<version>/ when set and present, else its wheel, downloaded into a
    temporary folder, read as a zip and deleted on exit (KitInputError when it cannot be had)."""
    if (src := os.environ.get("VLLM_SRC")) and (Path(src) / version / "vllm").is_dir():
        yield Source(version, root=Path(src) / version)
        return
    tmp = Path(tempfile.mkdtemp(prefix=f"vllm-{version}-"))
    try:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "-d", str(tmp)]
        r = subprocess.run([*pip, f"vllm=={version}"], capture_output=True, text=True)
        wheels = sorted(tmp.glob("vllm-*.whl"))
        if r.returncode or not wheels:
            last = (r.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise KitInputError(f"vllm=={version}: cannot download the wheel ({last})")
        with zipfile.ZipFile(wheels[0]) as zf:
            yield Source(version, zf=zf)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ev(path: str, node_or_line, text: str) -> Ev:
    line = node_or_line if isinstance(node_or_line, int) else node_or_line.lineno
    return [path, line, text.splitlines()[line - 1].strip()]


def _strs(node) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _norm(expr: str) -> str:
    """A condition as a short rule: vLLM's long attribute chains named by what they are."""
    for long, short in (
        (r"\w+\.tensor_parallel_size", "target_tp"),
        (r"speculative_draft_tensor_parallel_size|self\.draft_tensor_parallel_size|draft_tp", "draft_tp"),
    ):
        expr = re.sub(long, short, expr)
    return expr


# -- methods ----------------------------------------------------------------------------------------------------
def _literal_values(tree: ast.Module, name: str, seen: set | None = None) -> list[str]:
    """The strings of a module-level `Name = Literal[...]` alias, nested aliases flattened."""
    seen = seen or set()
    seen.add(name)
    for n in tree.body:
        tgt = n.target if isinstance(n, ast.AnnAssign) else n.targets[0] if isinstance(n, ast.Assign) else None
        if isinstance(tgt, ast.Name) and tgt.id == name and n.value is not None:
            out: list[str] = []
            for sub in ast.walk(n.value):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    out.append(sub.value)
                elif isinstance(sub, ast.Name) and sub.id not in ("Literal", "Union") and sub.id not in seen:
                    out += _literal_values(tree, sub.id, seen)
            return out
    return []


def _method_tuple(tree: ast.AST, text: str, path: str, fn_or_var: str) -> tuple[list[str], Ev | None]:
    """The strings of `self.method in (...)` returned by def `fn_or_var`, or assigned to variable `fn_or_var`."""
    for n in ast.walk(tree):
        hit = (isinstance(n, ast.FunctionDef) and n.name == fn_or_var) or (
            isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == fn_or_var for t in n.targets)
        )
        if not hit:
            continue
        for c in ast.walk(n):
            if isinstance(c, ast.Compare) and ast.unparse(c.left) == "self.method" and isinstance(c.ops[0], ast.In):
                return sorted(_strs(c.comparators[0])), _ev(path, c, text)
    return [], None


def derive_methods(src: Source) -> tuple[dict, dict]:
    path, text = src.first(SPEC_CONFIG_FILES)
    if text is None:
        return {"declared": []}, {}
    tree = ast.parse(text)
    declared = list(dict.fromkeys(_literal_values(tree, "SpeculativeMethod")))
    ev: dict[str, Ev] = {}
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(r"\s*SpeculativeMethod\b.*=", line):
            ev["declared"] = _ev(path, i, text)
    compared: dict[str, Ev] = {}  # every string `self.method` is compared with: what the code really accepts
    detect: list[list[str]] = []  # ("<substring> in draft model name", method it sets)
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare) and ast.unparse(n.left) == "self.method":
            for s in _strs(n.comparators[0]):
                compared.setdefault(s, _ev(path, n, text))
        if isinstance(n, ast.If) and ".model.lower()" in ast.unparse(n.test):
            sets = [
                b.value.value
                for b in n.body
                if isinstance(b, ast.Assign)
                and ast.unparse(b.targets[0]) == "self.method"
                and isinstance(b.value, ast.Constant)
            ]
            if sets:
                subs = [s for s in _strs(n.test) if s not in ("",)]
                detect.append([" or ".join(subs), sets[0]])
                ev.setdefault("name_detect", _ev(path, n, text))
    accepted = sorted(set(declared) | set(compared))
    family, ev_family = _method_tuple(tree, text, path, "use_eagle")
    aux, ev_aux = _method_tuple(tree, text, path, "uses_aux_hidden_states")
    if ev_family:
        ev["eagle_family"] = ev_family
    if ev_aux:
        ev["aux_hidden_state_methods"] = ev_aux
    if "eagle3" in compared:
        ev["eagle3_accepted"] = compared["eagle3"]
    value = {
        "declared": sorted(declared),
        "undeclared_accepted": sorted(set(compared) - set(declared)),
        "eagle3": [m for m in accepted if m == "eagle3" or m.endswith("_eagle3")],
        "eagle": [m for m in accepted if m == "eagle"],
        "eagle_family": family,
        "aux_hidden_state_methods": aux,
        "name_detect": detect,
    }
    return value, ev


# -- flags ------------------------------------------------------------------------------------------------------
def derive_flags(src: Source) -> tuple[dict, dict]:
    text = src.text(ARG_UTILS) or ""
    tree = ast.parse(text)
    lines = text.splitlines()
    options: dict[str, Ev] = {}
    calls: dict[str, ast.Call] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument":
            for a in n.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-"):
                    options.setdefault(a.value, _ev(ARG_UTILS, n, text))
                    calls.setdefault(a.value, n)
    spec = calls.get("--speculative-config")
    json_parsed = False
    if spec is not None:
        near = "\n".join(
            lines[max(0, spec.lineno - 4) : spec.end_lineno]
        )  # the call and a `kwargs["type"] = ...` above
        json_parsed = "json.loads" in near or "json" in ast.unparse(spec)
    spec_opts = sorted(o for o in options if re.search(r"spec|draft", o))
    value = {
        "speculative_config": spec is not None,
        "speculative_config_json": json_parsed,
        "speculative_config_aliases": sorted(
            a.value
            for a in (spec.args if spec else [])
            if isinstance(a, ast.Constant) and a.value != "--speculative-config"
        ),
        "legacy": {f: f in options for f in LEGACY_FLAGS},
        "spec_options": spec_opts,
    }
    return value, {o: options[o] for o in spec_opts}


# -- model classes: who supports EAGLE-3 aux hidden states ------------------------------------------------------
def _registry(src: Source) -> tuple[dict[str, dict[str, tuple[str, str]]], str]:
    """registry.py's tables: {table name: {architecture: (module, class)}}."""
    path = MODELS + "registry.py"
    text = src.text(path) or ""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for n in ast.parse(text).body:
        tgt = n.target if isinstance(n, ast.AnnAssign) else n.targets[0] if isinstance(n, ast.Assign) else None
        if not (isinstance(tgt, ast.Name) and isinstance(n.value, ast.Dict)):
            continue
        rows = {}
        for k, v in zip(n.value.keys, n.value.values, strict=True):
            if isinstance(k, ast.Constant) and isinstance(v, ast.Tuple) and len(v.elts) >= 2:
                m, c = v.elts[0], v.elts[1]
                if isinstance(m, ast.Constant) and isinstance(c, ast.Constant):
                    rows[k.value] = (m.value, c.value)
        if rows:
            out[tgt.id] = rows
    return out, text


class _Classes:
    """Every class of vllm/model_executor/models/*.py: its bases, resolved by import or file, and its methods."""

    def __init__(self, src: Source):
        self.src = src
        self.defs: dict[tuple[str, str], ast.ClassDef] = {}
        self.imports: dict[str, dict[str, tuple[str, str]]] = {}
        self.texts: dict[str, str] = {}
        for path in src.under(MODELS):
            mod = path[len(MODELS) : -3]
            if "/" in mod:
                continue
            text = src.text(path) or ""
            self.texts[mod] = text
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            imp = self.imports.setdefault(mod, {})
            for n in ast.walk(tree):
                if isinstance(n, ast.ClassDef):
                    self.defs.setdefault((mod, n.name), n)
                elif isinstance(n, ast.ImportFrom) and n.module:
                    base = n.module.removeprefix("vllm.model_executor.models.").lstrip(".")
                    for a in n.names:
                        imp[a.asname or a.name] = (base, a.name)

    def resolve(self, mod: str, name: str) -> tuple[str, str] | None:
        if (mod, name) in self.defs:
            return mod, name
        if name in self.imports.get(mod, {}) and self.imports[mod][name] in self.defs:
            return self.imports[mod][name]
        return None

    def mro(self, mod: str, name: str, seen=None) -> list[tuple[str, str, ast.ClassDef | None, list[str]]]:
        """(module, class, its ClassDef, its base names), depth-first, bases in order."""
        seen = seen if seen is not None else set()
        key = self.resolve(mod, name)
        if key is None or key in seen:
            return []
        seen.add(key)
        node = self.defs[key]
        bases = [ast.unparse(b).split(".")[-1].split("[")[0] for b in node.bases]
        out = [(key[0], key[1], node, bases)]
        for b in bases:
            out += self.mro(key[0], b, seen)
        return out

    def method(self, mod: str, name: str, meth: str):
        for m, _c, node, _b in self.mro(mod, name):
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == meth:
                    return m, f
        return None

    def supports_eagle3(self, mod: str, name: str) -> bool:
        for _m, _c, node, bases in self.mro(mod, name):
            if "SupportsEagle3" in bases or any(
                isinstance(f, ast.FunctionDef) and f.name in AUX_METHODS for f in node.body
            ):
                return True
        return False


def _formula(fn: ast.FunctionDef) -> str:
    """A layer-id method's rule as a short formula: the returned tuple, `num_layers` for the layer count."""
    ret = next((n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None), None)
    if ret is None:
        return "?"
    out = ast.unparse(ret.value)
    return "delegates" if re.fullmatch(r"self\.[\w.()]+\.\w+\(\)", out) else out


def derive_aux(src: Source) -> tuple[dict, dict]:
    tables, _ = _registry(src)
    classes = _Classes(src)
    archs, rules = [], {}
    ev: dict[str, Ev] = {}
    for table, rows in sorted(tables.items()):
        if not re.search(r"GENERATION|MULTIMODAL|TRANSFORMERS", table):  # targets generate; drafts are elsewhere
            continue
        for arch, (mod, cls) in rows.items():
            if not classes.supports_eagle3(mod, cls):
                continue
            archs.append(arch)
            for meth in DEFAULT_AUX:
                if (hit := classes.method(mod, cls, meth)) is not None:
                    rules.setdefault(_formula(hit[1]), set()).add(arch)
                    break
            else:
                rules.setdefault("interface default", set()).add(arch)
    default, _formula_ev = None, None
    iface = MODELS + "interfaces.py"
    for path in (iface, MODELS + "llama.py"):  # the interface's default, else Llama's (before the interface had one)
        text = src.text(path) or ""
        for n in ast.walk(ast.parse(text)):
            ret = next((r for r in ast.walk(n) if isinstance(r, ast.Return) and r.value is not None), None)
            if isinstance(n, ast.FunctionDef) and n.name in DEFAULT_AUX and default is None and ret is not None:
                default = _formula(n)
                ev["default"] = _ev(path, ret, text)
        if default is not None:
            break
    if "interface default" in rules and default:
        rules.setdefault(default, set()).update(rules.pop("interface default"))
    runner = "vllm/v1/worker/gpu_model_runner.py"
    rtext = src.text(runner) or ""
    for i, line in enumerate(rtext.splitlines(), 1):
        if "eagle_aux_hidden_state_layer_ids" in line:
            ev["ids_from_draft_config"] = _ev(runner, i, rtext)
            break
    value = {
        "archs": sorted(set(archs)),
        "default": default,
        "overrides": {f: sorted(a) for f, a in sorted(rules.items()) if f != default},
        "ids_from_draft_config": "ids_from_draft_config" in ev,
    }
    return value, ev


# -- EAGLE-3 draft classes and their loaders --------------------------------------------------------------------
def _loader_ops(text: str, path: str, fn: ast.AST) -> list[dict]:
    """What one `load_weights` does to checkpoint names, in source order: skip / rename / prefix / map / drop_if /
    require / skip_prefixes / stacked, each with its condition and line."""
    ops: list[dict] = []

    def add(op: dict, node) -> None:
        ops.append({**op, "at": _ev(path, node, text)[1:]})

    parents = {c: p for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}

    def cond(node) -> str | None:
        p = parents.get(node)
        while p is not None and not isinstance(p, ast.If):
            p = parents.get(p)
        return ast.unparse(p.test) if p is not None else None

    for n in ast.walk(fn):
        if isinstance(n, ast.If) and isinstance(n.body[0], ast.Continue) and len(n.body) == 1 and _strs(n.test):
            add({"op": "skip", "if": ast.unparse(n.test)}, n)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "replace":
            a = n.args
            if len(a) == 2 and all(isinstance(x, ast.Constant) for x in a):
                add({"op": "rename", "from": a[0].value, "to": a[1].value, "if": cond(n)}, n)
        elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and isinstance(n.left, ast.Constant):
            if isinstance(n.left.value, str) and isinstance(n.right, ast.Name):
                add({"op": "prefix", "add": n.left.value, "if": cond(n)}, n)
        elif (
            isinstance(n, ast.keyword)
            and n.arg in ("orig_to_new_substr", "orig_to_new_prefix")
            and isinstance(n.value, ast.Dict)
        ):
            for k, v in zip(n.value.keys, n.value.values, strict=True):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Constant):
                    add({"op": "map", "from": k.value, "to": v.value}, k)
        elif isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Subscript):
            t = n.targets[0]
            if "orig_to_new" in ast.unparse(t.value) and isinstance(n.value, ast.Constant) and n.value.value is None:
                add({"op": "drop_if", "key": ast.literal_eval(t.slice), "if": cond(n)}, n)
        elif isinstance(n, ast.Raise) and n.exc is not None:
            add({"op": "require", "if": cond(n), "message": " ".join(_strs(n.exc))[:160]}, n)
        elif (
            isinstance(n, ast.keyword)
            and n.arg == "skip_prefixes"
            and not (isinstance(n.value, ast.Constant) and n.value.value is None)
        ):
            add({"op": "skip_prefixes", "value": ast.unparse(n.value)}, n)
        elif isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "stacked_params_mapping":
            add({"op": "stacked", "value": [_strs(e)[:2] for e in getattr(n.value, "elts", [])]}, n)
        elif isinstance(n, ast.keyword) and n.arg == "orig_to_new_stacked" and isinstance(n.value, ast.Dict):
            add(
                {"op": "stacked", "value": [[_strs(v)[0], _strs(k)[0]] for k, v in zip(n.value.keys, n.value.values)]},
                n,
            )
    return sorted(ops, key=lambda o: o["at"][0])


def _summary(ops: list[dict]) -> dict[str, str]:
    """The checkpoint names an EAGLE-3 user asks about, and what the loader does with each."""
    out = {}
    for key in ("d2t", "t2d", "midlayer.", "lm_head", "embed_tokens", "mask_hidden"):
        for o in ops:
            if o["op"] == "skip" and f"'{key}' in name" in o["if"].replace('"', "'"):
                out[key] = "skipped"
            elif o["op"] in ("rename", "map") and o["from"] == key:
                out[key] = f"-> {o['to']}" if o["to"] is not None else "dropped"
            elif o["op"] == "prefix" and o["if"] and key in o["if"]:
                out.setdefault(key, f"kept (no {o['add']} prefix)")
            if key in out:
                break
    return out


def derive_drafts(src: Source) -> tuple[dict, dict]:
    tables, _ = _registry(src)
    spec = tables.get("_SPECULATIVE_DECODING_MODELS", {})
    archs = {a: f"{m}.{c}" for a, (m, c) in spec.items() if "eagle3" in m or "Eagle3" in c}
    classes = _Classes(src)
    loaders, ev = {}, {}
    for target in sorted(set(archs.values())):
        mod, cls = target.split(".")
        path, text = MODELS + mod + ".py", classes.texts.get(mod, "")
        ops: list[dict] = []
        hit = classes.method(mod, cls, "load_weights")
        if hit and hit[0] == mod:
            ev[target] = _ev(path, hit[1], text)
            # the draft class's loader, then its file's inner models' (`self.model.load_weights`), each with the
            # class-level `hf_to_vllm_mapper = WeightsMapper(...)` it applies
            for (m, c), node in sorted(classes.defs.items(), key=lambda kv: kv[0][1] != cls):
                if m != mod or (c != cls and not c.endswith("Model")):
                    continue
                parts = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "load_weights"]
                parts += [
                    a for a in node.body if isinstance(a, ast.Assign) and "WeightsMapper(" in ast.unparse(a.value)
                ]
                for part in parts:
                    ops += [{**o, "in": c} if c != cls else o for o in _loader_ops(text, path, part)]
        loaders[target] = {"ops": [{k: v for k, v in o.items() if k != "at"} for o in ops], "names": _summary(ops)}
        if hit and hit[0] != mod:
            loaders[target]["inherits_load_weights"] = f"{hit[0]}.{cls}"
        ev[target + ":ops"] = [o["at"][0] for o in ops]
    return {"archs": dict(sorted(archs.items())), "loaders": loaders}, ev


# -- draft tensor parallelism -----------------------------------------------------------------------------------
def derive_draft_tp(src: Source) -> tuple[dict, dict]:
    value: dict[str, Any] = {"allowed": None, "default": None, "checks": []}
    ev: dict[str, Ev] = {}
    path, text = src.first(SPEC_CONFIG_FILES)
    if text:
        for n in ast.walk(ast.parse(text)):
            if isinstance(n, ast.FunctionDef) and n.name == "_verify_and_get_draft_tp":
                for c in ast.walk(n):
                    if isinstance(c, ast.Compare) and isinstance(c.ops[0], ast.NotIn):
                        value["allowed"] = _norm(ast.unparse(c.comparators[0]))
                        ev["allowed"] = _ev(path, c, text)
                    if isinstance(c, ast.If) and ast.unparse(c.test).endswith("is None") and value["default"] is None:
                        assigns = [b for b in ast.walk(c) if isinstance(b, ast.Assign)]
                        value["default"] = " / ".join(dict.fromkeys(_norm(ast.unparse(a.value)) for a in assigns))
                        ev["default"] = _ev(path, c, text)
    for p in src.under("vllm/v1/spec_decode/"):
        t = src.text(p) or ""
        for n in ast.walk(ast.parse(t)):
            if isinstance(n, ast.If) and any(isinstance(b, ast.Raise) for b in n.body):
                test = ast.unparse(n.test)
                if re.search(r"draft_tp|tensor_parallel", test):
                    value["checks"].append({"if": _norm(test), "file": p})
                    ev[f"check:{p}"] = _ev(p, n, t)
    return value, ev


# -- speculators-format configs ---------------------------------------------------------------------------------
def derive_speculators(src: Source) -> tuple[dict, dict]:
    ev: dict[str, Ev] = {}
    algos: dict[str, dict] = {}
    for p in src.under(SPECULATORS_DIR):
        t = src.text(p) or ""
        for n in ast.walk(ast.parse(t)):
            if isinstance(n, ast.FunctionDef):
                for d in n.decorator_list:
                    if isinstance(d, ast.Call) and ast.unparse(d.func) == "register_speculator" and d.args:
                        name = d.args[0].value  # type: ignore[attr-defined]
                        archs = {}
                        for a in ast.walk(n):
                            if isinstance(a, ast.Assign) and isinstance(a.value, ast.Dict):
                                if ast.unparse(a.targets[0]).endswith("arch_map"):
                                    archs = ast.literal_eval(a.value)
                            if isinstance(a, ast.Subscript) and ast.unparse(a) == 'pre_trained_config["architectures"]':
                                pass
                        sets = re.findall(r'pre_trained_config\["architectures"\]\s*=\s*\["(\w+)"\]', ast.unparse(n))
                        algos[name] = {"archs_by_model_type": archs} if archs else {"archs": sets}
                        ev[name] = _ev(p, d, t)
    detect = None
    for p in ("vllm/transformers_utils/config.py", ARG_UTILS):
        t = src.text(p) or ""
        for i, line in enumerate(t.splitlines(), 1):
            if re.search(r"def maybe_override_with_speculators|speculators_config", line) and detect is None:
                detect = _ev(p, i, t)
    if detect:
        ev["detect"] = detect
    key = None
    for p in src.under(SPECULATORS_DIR):
        t = src.text(p) or ""
        if m := re.search(r'config_dict(?:\.get\(|\[)"(speculators_\w+)"', t):
            key = m.group(1)
    return {
        "detects": detect is not None and bool(algos),
        "type_key": key,
        "algorithms": dict(sorted(algos.items())),
    }, ev


# -- Prometheus counters ----------------------------------------------------------------------------------------
def derive_metrics(src: Source) -> tuple[dict, dict]:
    ev: dict[str, Ev] = {}
    declared: set[str] = set()
    for p in METRICS_FILES:
        t = src.text(p) or ""
        for n in ast.walk(ast.parse(t)):
            if (
                isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and re.fullmatch(r"vllm:spec_decode\w+", n.value)
            ):
                line = t.splitlines()[n.lineno - 1]
                around = "\n".join(t.splitlines()[max(0, n.lineno - 4) : n.lineno + 1]).lower()
                counter = "counter" in around or "counter_specs" in around or "_total" in n.value
                name = n.value.removesuffix("_total") + "_total" if counter else n.value
                declared.add(n.value)
                ev.setdefault(name, [p, n.lineno, line.strip()])
    return {"declared": sorted(declared), "exposed": sorted(ev)}, ev


DERIVERS = {
    "methods": derive_methods,
    "flags": derive_flags,
    "aux_archs": derive_aux,
    "draft_archs": derive_drafts,
    "draft_tp": derive_draft_tp,
    "speculators": derive_speculators,
    "metrics": derive_metrics,
}


def derive(version: str) -> dict[str, dict]:
    """Release `version`'s row: {field: {"value": ..., "evidence": ...}}, read from its wheel."""
    with open_source(version) as src:
        if src.text(MODELS + "llama_eagle3.py") is None:
            raise KitInputError(f"vllm {version} has no EAGLE-3 draft class ({MODELS}llama_eagle3.py)")
        return {f: dict(zip(("value", "evidence"), d(src), strict=True)) for f, d in DERIVERS.items()}


# -- vLLM's own parser, in a side environment -------------------------------------------------------------------
_PARSER_WORKER = r"""
import argparse, json, sys
from vllm.engine.arg_utils import AsyncEngineArgs
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
p = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
rows = []
for a in p._actions:
    if not a.option_strings or isinstance(a, argparse._HelpAction):
        continue
    d = a.default
    rows.append({"options": a.option_strings, "dest": a.dest,
                 "default": d if isinstance(d, (str, int, float, bool, type(None))) else repr(d),
                 "choices": [str(c) for c in a.choices] if a.choices else None})
print(json.dumps(rows))
"""


def parser_flags(version: str, site: str) -> list[dict]:
    """Every option of `AsyncEngineArgs.add_cli_args` run in this interpreter (its CPU torch and transformers) with
    `site` first on the path: folders joined by os.pathsep, vllm==version installed there `pip install --no-deps
    --target`, and beside it the few pure-Python packages its import chain needs that this venv lacks (for 0.33.0:
    cbor2 openai-harmony openai cloudpickle pybase64 cachetools uvloop py-cpuinfo xgrammar apache-tvm-ffi
    partial-json-parser llguidance). Each option: its strings, dest, default, choices."""
    env = {**os.environ, "PYTHONPATH": site, "VLLM_TARGET_DEVICE": "cpu"}
    r = subprocess.run([sys.executable, "-c", _PARSER_WORKER], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode:
        raise KitInputError(f"vllm {version}'s parser did not run: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# -- the stored table -------------------------------------------------------------------------------------------
def spans(rows: dict[str, dict]) -> list[dict]:
    """Consecutive releases with equal values as one span, the first release's evidence kept."""
    out: list[dict] = []
    for v in sorted(rows, key=Version.parse):
        if out and out[-1]["value"] == rows[v]["value"]:
            out[-1]["last"] = v
        else:
            out.append({"first": v, "last": v, "value": rows[v]["value"], "evidence": rows[v].get("evidence", {})})
    return out


def _listed() -> list[str]:
    return json.loads(RELEASES_PATH.read_text())["releases"] if RELEASES_PATH.exists() else []


def listed_releases() -> list[str]:
    """Every final vLLM release (post releases included) from FIRST_RELEASE through LAST_RELEASE on the index."""
    r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "vllm"], capture_output=True, text=True)
    m = re.search(r"Available versions: (.*)", r.stdout)
    if not m:
        raise KitInputError(f"pip index versions vllm: {r.stderr.strip()[-200:]}")
    lo, hi = Version.parse(FIRST_RELEASE), Version.parse(LAST_RELEASE)
    finals = [v for v in m.group(1).split(", ") if not re.search(r"(a|b|rc|dev)\d*$", v)]
    return sorted((v for v in finals if lo <= Version.parse(v) <= hi), key=Version.parse)


def stored_rows() -> dict[str, dict[str, dict]]:
    """{field: {release: {"value", "evidence"}}} of the stored table, spans expanded."""
    if not RULES_PATH.exists():
        return {}
    doc, listed = json.loads(RULES_PATH.read_text()), _listed()
    out: dict[str, dict[str, dict]] = {}
    for f, ss in doc["fields"].items():
        for s in ss:
            i, j = listed.index(s["first"]), listed.index(s["last"])
            for v in listed[i : j + 1]:
                out.setdefault(f, {})[v] = {"value": s["value"], "evidence": s["evidence"]}
    return out


def write(rows: dict[str, dict[str, dict]], releases: list[str]) -> None:
    """Store `rows` ({release: {field: {"value", "evidence"}}}) over the stored table, and the release list."""
    write_text(
        RELEASES_PATH,
        json.dumps(
            {
                "_doc": "every final vLLM release from EAGLE-3's first (llama_eagle3.py) through "
                f"{LAST_RELEASE}, from `pip index versions vllm`; written by `python -m kit.derive.vllm_scan --write`",
                "releases": releases,
            },
            indent=1,
        )
        + "\n",
    )
    table = stored_rows()
    for v, row in rows.items():
        for f, cell in row.items():
            table.setdefault(f, {})[v] = cell
    doc = {
        "_doc": "generated by `python -m kit.derive.vllm_scan --write [V...]` from real vllm wheels (read as text, "
        "never imported): per field, spans of consecutive releases with equal values, each with file:line "
        "evidence [file, line, text] from the span's first release; read by kit.vllm.rules, checked by "
        "kit/tests/vllm/test_rules.py",
        "fields": {f: spans(table.get(f, {})) for f in (*FIELDS, "parser_flags") if table.get(f)},
    }
    write_text(RULES_PATH, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--parser"]:
        v, site = argv[1], argv[2]
        how = f"AsyncEngineArgs.add_cli_args(FlexibleArgumentParser()) run with vllm=={v} installed --no-deps"
        write({v: {"parser_flags": {"value": parser_flags(v, site), "evidence": {"how": how}}}}, _listed())
        return
    if argv[:1] == ["--write"]:
        releases = _listed() or listed_releases()
        todo = argv[1:] or releases
        rows = {}
        for v in todo:
            rows[v] = derive(v)
            print(v, "derived", flush=True)
        write(rows, releases)
        return
    for v in argv or [LAST_RELEASE]:
        print(json.dumps({f: c["value"] for f, c in derive(v).items()}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
