"""Derive SGLang's EAGLE-3 aux-capture rules from a release's real source (never imported).

Which target architectures can capture aux hidden states, and what each does with the draft's
`eagle_aux_hidden_state_layer_ids`, changes between SGLang releases (the "+1" shift, PR #25454's
DeepSeek/Kimi conditional, the GptOss `max(ids) == L` rule, wrappers that delegate). Typing that
table by hand goes stale; instead this module

1. parses every `srt/models/*.py` of the release (ast), collects `EntryClass` architectures
   and resolves each one's `set_eagle3_layers_to_capture` through its base classes;
2. *executes the real method body* on a stand-in `self` (a recorder object with a real
   `config.num_hidden_layers`) for probe id lists, and records the `layers_to_capture` it sets —
   so the rule is what SGLang's code does, not what we think it does;
3. finds where the release reads the ids (`eagle_config[...]` only, or also top level) and
   whether capture is tied to `--speculative-algorithm EAGLE3`;
4. checks that the capture reaches the forward: a class whose setter (its own or inherited) writes
   `self.model.layers_to_capture` while the decoder model it builds captures only the layers marked
   `_is_layer_to_capture` (which only that model's own setter marks) returns a bare tensor where its
   `forward` unpacks `(hidden, aux)`: SGLang crashes at startup. Recorded under "bare_forward". The decoder
   model is the class `__init__` builds, named there or the default of the `__init__` parameter that builds it
   (Qwen3.5's VL wrappers pass `language_model_cls` to Qwen3-VL's `__init__`: 0.5.11-0.5.21, sglang PR 25408);
5. checks that the captured states reach the draft: a forward that unpacks `(hidden, aux)` under
   `capture_aux_hidden_states` but calls `self.logits_processor` without `aux` hands the draft worker the final
   hidden state alone (the VL wrappers of 0.5.5.x; SpecForge issue 310, fixed by sglang PR 13904). Recorded
   under "aux_dropped".

`python -m kit.derive.capture_scan --write [VERSION ...]` regenerates kit/sglang/capture_rules.json (the recorded
table kit.wiring.aux uses offline); kit/tests/test_aux.py re-derives versions and compares.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import textwrap
import types
from pathlib import Path
from typing import Any, Optional

from kit.sglang.versions import DEFAULT_RELEASE

METHOD = "set_eagle3_layers_to_capture"
PROBE_L = 61
# probe id lists chosen so that no rule maps two of them onto the same result (L = 61)
PROBES = {"default": None, "first_is_1": [1, 20, 40], "first_is_2": [2, 21, 41], "max_is_L": [2, 21, 61]}


_PROBE = {"L": PROBE_L}


class _Rec:
    """Stand-in for `self` and anything reached from it: records assignments and delegations."""

    def __init__(self, path: str, log: list):
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_log", log)

    def __getattr__(self, name):
        if name == METHOD:
            return lambda *a, **k: self._log.append(("delegate", self._path, a[0] if a else k.get("layer_ids")))
        child = _Rec(f"{self._path}.{name}", self._log)
        object.__setattr__(self, name, child)
        return child

    def __setattr__(self, name, value):
        if name == "layers_to_capture":
            self._log.append(("set", f"{self._path}.{name}", list(value) if value is not None else None))
        object.__setattr__(self, name, value)

    def __call__(self, *a, **k):
        return _Rec(f"{self._path}()", self._log)

    def __getitem__(self, k):
        return _Rec(f"{self._path}[]", self._log)

    def __setitem__(self, k, v):
        pass

    def __iter__(self):
        return iter(())

    def __len__(self):
        return _PROBE["L"]  # e.g. `len(self.model.layers)` used as the layer count

    def __bool__(self):
        return True


def _config(L: int):
    ns = types.SimpleNamespace(num_hidden_layers=L)
    ns.text_config = types.SimpleNamespace(num_hidden_layers=L)
    ns.get_text_config = lambda: ns.text_config
    return ns


def run_method(func_src: str, layer_ids, L: int = PROBE_L) -> dict[str, Any]:
    """Execute one `set_eagle3_layers_to_capture` source on a recorder; return what it did."""
    code = compile(textwrap.dedent(func_src), "<sglang>", "exec")
    g: dict[str, Any] = {"List": list, "Optional": Optional, "Dict": dict, "Tuple": tuple, "Any": Any}
    for _ in range(30):  # unknown module-level names (logger, torch...) become recorders
        try:
            ns: dict[str, Any] = {}
            exec(code, g, ns)
            fn = ns[METHOD]
            log: list = []
            me = _Rec("self", log)
            object.__setattr__(me, "config", _config(L))
            _PROBE["L"] = L
            nargs = fn.__code__.co_argcount
            if nargs >= 2:
                fn(me, None if layer_ids is None else list(layer_ids))
            else:  # old releases: set_eagle3_layers_to_capture(self) takes no ids
                fn(me)
            sets = [e for e in log if e[0] == "set"]
            dele = [e for e in log if e[0] == "delegate"]
            if sets:
                return {"layers_to_capture": sets[-1][2], "writes": sets[-1][1]}
            if dele and dele[-1][1] == "self.model":
                # the inner decoder's setter stores the list it is given
                return {"layers_to_capture": dele[-1][2], "via": "self.model." + METHOD}
            if dele:
                return {"delegates": dele[-1][1], "passes": dele[-1][2]}
            return {"noop": True}
        except NameError as e:
            m = re.search(r"name '(\w+)' is not defined", str(e))
            if not m:
                return {"error": f"NameError: {e}"}
            g[m.group(1)] = _Rec(m.group(1), [])
        except Exception as e:  # noqa: BLE001 — record, never crash the scan
            return {"error": f"{type(e).__name__}: {e}"}
    return {"error": "too many unknown names"}


def classify(results: dict[str, dict], L: int = PROBE_L) -> dict[str, str]:
    """Name the rule from probe results: default points and explicit-id handling."""
    dflt = [2, L // 2, L - 3]
    out: dict[str, str] = {}
    d = results["default"]
    if "delegates" in d:
        return {"rule": "delegates", "to": d["delegates"].replace("self.", "", 1)}
    if "layers_to_capture" not in d:
        return {"rule": "unknown", "detail": json.dumps(d)}
    out["default"] = (
        "2,L//2,L-3"
        if d["layers_to_capture"] == dflt
        else "+1 of 2,L//2,L-3"
        if d["layers_to_capture"] == [x + 1 for x in dflt]
        else "other:" + json.dumps(d["layers_to_capture"])
    )

    def kind(name):
        r = results[name].get("layers_to_capture")
        ids = PROBES[name]
        return (
            "plus1"
            if r == [x + 1 for x in ids]
            else "as_is"
            if r == ids
            else "ignored"
            if r == d["layers_to_capture"]
            else "other"
        )

    k = {n: kind(n) for n in ("first_is_1", "first_is_2", "max_is_L")}
    if len(set(k.values())) == 1:
        out["explicit"] = k["first_is_1"]
    elif k["first_is_1"] == "plus1" and k["first_is_2"] == "as_is" and k["max_is_L"] == "as_is":
        out["explicit"] = "plus1_if_first_is_1"
    elif k["max_is_L"] == "as_is" and k["first_is_2"] == "plus1":
        out["explicit"] = "as_is_if_max_is_L"
    else:
        out["explicit"] = "other:" + json.dumps(k)
    out["rule"] = "default " + out["default"] + "; explicit " + out["explicit"]
    return out


def _entry_names(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
            v = node.value
            elts = v.elts if isinstance(v, (ast.List, ast.Tuple)) else [v]
            return [e.id for e in elts if isinstance(e, ast.Name)]
    return []


class _Classes:
    """The classes of one release's model files, found as a file sees them (its own, imported, else anywhere),
    with what the scan asks of them: a method through the bases, what `__init__` builds."""

    def __init__(self, files: dict[str, str]):
        self.by_file: dict[str, dict[str, ast.ClassDef]] = {}
        self.imports: dict[str, dict[str, tuple[str, str]]] = {}
        self.texts: dict[str, str] = {}
        self.entries: list[tuple[str, str]] = []  # (EntryClass architecture, its file)
        for rel, text in files.items():
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            self.texts[rel] = text
            self.by_file[rel] = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
            imp = self.imports.setdefault(rel, {})
            for n in ast.walk(tree):
                if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("sglang.srt.models."):
                    mod = "srt/models/" + n.module.rsplit(".", 1)[1] + ".py"
                    for a in n.names:
                        imp[a.asname or a.name] = (mod, a.name)
            self.entries += [(n, rel) for n in _entry_names(tree)]

    def lookup(self, name: str, rel: str) -> tuple[str, ast.ClassDef] | None:
        """A class as seen from file `rel`: defined there, imported, or (last resort) anywhere."""
        if name in self.by_file.get(rel, {}):
            return rel, self.by_file[rel][name]
        if name in self.imports.get(rel, {}):
            mod, orig = self.imports[rel][name]
            if orig in self.by_file.get(mod, {}):
                return mod, self.by_file[mod][orig]
        hits = [(r, c[name]) for r, c in sorted(self.by_file.items()) if name in c]
        return hits[0] if hits else None

    def find_method(self, name: str, rel: str, seen=()) -> tuple[str, str, str] | None:
        """(owning class, its file, source) of the capture setter `METHOD` as `name` resolves it."""
        hit = self.lookup(name, rel)
        if hit is None or (hit[0], name) in seen:
            return None
        crel, node = hit
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == METHOD:
                return node.name, crel, ast.get_source_segment(self.texts[crel], item)
        for b in node.bases:
            bname = b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else None
            found = bname and self.find_method(bname, crel, seen + ((crel, name),))
            if found:
                return found
        return None

    def inner_class(self, name: str, rel: str, attr: str) -> tuple[str, str] | None:
        """(class, file) assigned to self.<attr> in __init__ (what a delegating wrapper forwards to)."""
        hit = self.lookup(name, rel)
        if hit is None:
            return None
        m = re.search(rf"self\.{attr}\s*=\s*(\w+)\(", ast.get_source_segment(self.texts[hit[0]], hit[1]) or "")
        return (m.group(1), hit[0]) if m else None

    def mro(self, name: str, rel: str, seen=()) -> list[tuple[str, ast.ClassDef]]:
        hit = self.lookup(name, rel)
        if hit is None or (hit[0], name) in seen:
            return []
        crel, node = hit
        out = [(crel, node)]
        for b in node.bases:
            bname = b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else None
            if bname:
                out += self.mro(bname, crel, seen + ((crel, name),))
        return out

    def method_src(self, name: str, rel: str, meth: str) -> tuple[str, str] | None:
        """(defining class, source) of `meth` as `name` resolves it through its bases."""
        for crel, node in self.mro(name, rel):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == meth:
                    return node.name, ast.get_source_segment(self.texts[crel], item) or ""
        return None

    def param_default(self, name: str, rel: str, param: str) -> tuple[str, str] | None:
        """(class, file) an `__init__` parameter defaults to, as the class itself resolves it: the first
        `__init__` along the bases that declares the parameter with a class as its default (a VL wrapper passing
        `language_model_cls=...` to its base's `__init__`)."""
        for crel, node in self.mro(name, rel):
            init = next((i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == "__init__"), None)
            if init is None:
                continue
            args = init.args.args[len(init.args.args) - len(init.args.defaults) :]
            for a, d in zip(args, init.args.defaults):
                if a.arg == param and isinstance(d, ast.Name) and self.lookup(d.id, crel):
                    return d.id, crel
        return None

    def built_class(self, name: str, rel: str, attr: str) -> tuple[str, str] | None:
        """(class, file) the first `__init__` along the bases assigns to self.<attr> (a class named there, or the
        default of the `__init__` parameter it calls)."""
        for crel, node in self.mro(name, rel):
            init = next((i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == "__init__"), None)
            src = ast.get_source_segment(self.texts[crel], init) if init else None
            if src and re.search(rf"self\.{attr}\s*=", src):
                m = re.search(rf"self\.{attr}\s*=\s*(\w+)\(", src)
                if m and self.lookup(m.group(1), crel):
                    return m.group(1), crel
                return self.param_default(name, rel, m.group(1)) if m else None
        return None


def _bare_forward(classes: _Classes, arch: str, rel: str, probe: dict, setter_src: str) -> dict | None:
    """Why the setter's capture never reaches the forward (a bare tensor where (hidden, aux) is unpacked)."""
    m = re.fullmatch(r"self\.(\w+)\.layers_to_capture", probe.get("writes") or "")
    if not m or "_is_layer_to_capture" in setter_src:  # a setter that marks the layers itself is read
        return None
    holder = classes.built_class(arch, rel, m.group(1))
    fwd = classes.method_src(*holder, "forward") if holder else None
    outer = classes.method_src(arch, rel, "forward")
    if not fwd or not outer or "capture_aux_hidden_states" not in outer[1]:
        return None
    per_layer = [v for v in re.findall(r"(\S+)\s+in\s+self\.layers_to_capture", fwd[1]) if not v.startswith("self.")]
    if per_layer or "_is_layer_to_capture" not in fwd[1]:  # the forward tests each layer against the list
        return None
    return {
        "writes": probe["writes"].replace("self.", "", 1),
        "model_class": holder[0],
        "forward_of": fwd[0],
        "reads": "_is_layer_to_capture",
    }


def _aux_dropped(classes: _Classes, arch: str, rel: str) -> dict | None:
    """Where the forward that runs unpacks the aux states (`hidden, aux = hidden` under
    `capture_aux_hidden_states`) yet calls the logits processor without them: the draft worker reads the
    logits output's hidden states, so it gets the final hidden state alone (SpecForge issue 310)."""
    outer = classes.method_src(arch, rel, "forward")
    if not outer or "capture_aux_hidden_states" not in outer[1]:
        return None
    tree = ast.parse(textwrap.dedent(outer[1]))
    names = {
        t.elts[1].id
        for n in ast.walk(tree)
        if isinstance(n, ast.If) and "capture_aux_hidden_states" in ast.unparse(n.test)
        for a in n.body
        if isinstance(a, ast.Assign)
        for t in a.targets
        if isinstance(t, ast.Tuple) and len(t.elts) == 2 and isinstance(t.elts[1], ast.Name)
    }
    calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and ast.unparse(c.func) == "self.logits_processor"]
    if not names or not calls:
        return None
    passed = {
        n.id
        for c in calls
        for arg in [*c.args, *(k.value for k in c.keywords)]
        for n in ast.walk(arg)
        if isinstance(n, ast.Name)
    }
    if names & passed:
        return None
    return {"forward_of": outer[0], "unpacks": sorted(names)[0], "not_passed_to": "self.logits_processor"}


def _delegated(classes: _Classes, arch: str, rel: str, setter: tuple[str, str, str], to: str) -> dict[str, Any]:
    """A setter that forwards to the inner model at `to` (rule "delegates"): that model and its rule, or why none."""
    owner, mrel, src = setter
    attr = to.split(".")[0]
    inner = classes.inner_class(owner, mrel, attr) or classes.inner_class(arch, rel, attr)
    out: dict[str, Any] = {"inner": inner[0] if inner else None}
    ih = classes.find_method(*inner) if inner else None
    if ih is None:
        out["capture"] = "unknown" if inner is None else False
        return out
    rule = classify({k: run_method(ih[2], v) for k, v in PROBES.items()})
    out.update({k: v for k, v in rule.items() if k in ("default", "explicit")})
    out["silent_noop_if_inner_lacks"] = bool(re.search(rf"hasattr\(\s*self\.{attr},\s*[\"']{METHOD}", src))
    return out


def _model_row(classes: _Classes, arch: str, rel: str) -> dict[str, Any]:
    """The capture row of one EntryClass architecture: its setter run on the probes, and whether the capture
    reaches the forward and the draft."""
    hit = classes.find_method(arch, rel)
    if hit is None:
        return {"file": rel, "capture": False}
    owner, mrel, src = hit
    res = {k: run_method(src, v) for k, v in PROBES.items()}
    rule = classify(res)
    row = {"file": rel, "capture": True, "method_in": f"{owner} ({mrel})", **rule}
    bare = _bare_forward(classes, arch, rel, res["default"], src)
    if bare:
        row["bare_forward"] = bare
    dropped = _aux_dropped(classes, arch, rel)
    if dropped:
        row["aux_dropped"] = dropped
    if rule["rule"] == "delegates":
        row.update(_delegated(classes, arch, rel, hit, rule["to"]))
    return row


def scan_models(files: dict[str, str]) -> dict[str, Any]:
    """{architecture: {file, method_in, rule...}} for every EntryClass of one release."""
    classes = _Classes(files)
    out: dict[str, Any] = {}
    for arch, rel in classes.entries:
        out[arch] = _model_row(classes, arch, rel)
    return out


def _hits(text: str, rel: str, pattern: str) -> list:
    out = []
    for m in re.finditer(pattern, text):
        ln = text.count("\n", 0, m.start()) + 1
        out.append([rel, ln, text.splitlines()[ln - 1].strip()])
    return out


def scan_id_source(files: dict[str, str]) -> dict[str, Any]:
    """Where the release reads the capture ids (evidence: file, line, text)."""
    nested, top, gate = [], [], []
    for rel, text in sorted(files.items()):
        nested += _hits(text, rel, r"eagle_config\s*(\[|\.get\()\s*[\"']eagle_aux_hidden_state_layer_ids")
        top += _hits(text, rel, r"getattr\(\s*[\w.]*hf_config,\s*[\"']eagle_aux_hidden_state_layer_ids")
        if nested and nested[-1][0] == rel:
            gate += _hits(text, rel, r"if [\w.]*(spec_algorithm|speculative_algorithm)[\w.]*\.is_eagle3\(\)")
    return {
        "nested": nested[:3],
        "top_level_for_capture": top[:3],
        "eagle3_gate": gate[:3],
        "reads": "nested_only" if nested and not top else "top_level_too" if top else "none_found",
    }


def derive(version: str, download: bool = True) -> dict[str, Any]:
    """Compact per-release record: {"rules": {"<default>|<explicit>": [arch...]}, "delegates": {...}, "id_source"}."""
    from kit.sglang.source import source_files

    archs = scan_models(source_files(version, "srt/models", download))
    rules: dict[str, list[str]] = {}
    delegates = {}
    bare = {}
    dropped = {}
    for a, r in sorted(archs.items()):
        if r.get("capture") is not True:
            continue
        rules.setdefault(f"{r.get('default')}|{r.get('explicit')}", []).append(a)
        if r.get("bare_forward"):
            bare[a] = r["bare_forward"]
        if r.get("aux_dropped"):
            dropped[a] = r["aux_dropped"]
        if r.get("rule") == "delegates":
            delegates[a] = {
                "to": r.get("to"),
                "inner": r.get("inner"),
                "silent_noop_if_inner_lacks": r.get("silent_noop_if_inner_lacks", False),
            }
    return {
        "rules": rules,
        "delegates": delegates,
        "bare_forward": bare,
        **({"aux_dropped": dropped} if dropped else {}),
        "without_capture_count": sum(r.get("capture") is not True for r in archs.values()),
        "id_source": scan_id_source(source_files(version, "srt/model_executor", download)),
    }


def _table_doc(rows: dict[str, dict]) -> dict[str, Any]:
    return {
        "_doc": "generated by `python -m kit.derive.capture_scan --write` from real sglang wheels (method bodies executed "
        "on probe ids, L=61); checked by kit/tests/test_aux.py",
        "probe_L": PROBE_L,
        "probes": PROBES,
        "versions": rows,
    }


def stored(path: Path | None = None) -> dict[str, dict]:
    """The repository's rows (without rows derived on this machine)."""
    from kit.derive import read_rows
    from kit.sglang.capture import TABLE_PATH

    return read_rows(path or TABLE_PATH)


def add_rows(rows: dict[str, dict], path: Path | None = None) -> bool:
    """Store these releases' rows (`derive`) in capture_rules.json, every other row as it was; True when it changed."""
    from kit.derive import write_table
    from kit.sglang.capture import TABLE_PATH

    return write_table(path or TABLE_PATH, _table_doc({**stored(path), **rows}))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--write"]
    if "--write" in sys.argv:
        from kit.sglang.loader import known_versions

        add_rows({v: derive(v) for v in args or known_versions()})
    else:
        d = derive(args[0] if args else DEFAULT_RELEASE)
        for rule, archs in d["rules"].items():
            print(f"{rule}: {', '.join(archs)}")
        print("delegating wrappers:", d["delegates"])
        print("ids read:", d["id_source"])
