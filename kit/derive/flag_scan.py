"""Derive SGLang's flag table per release by running the release's real parser once (never imported here).

`ServerArgs.add_cli_args` is built in the release's side environment (`kit.sglang.parser`'s
interpreter: sglang installed `--no-deps` over this interpreter's CPU torch); every argparse action
is written out with its option strings, dest, action kind, nargs, value parser, choices, default
and const. The release's launch entry points come from its installed metadata (console scripts of
entry_points.txt) and its source (`python -m` modules whose `__main__` block starts a server).
The result goes to kit/sglang/server_flags.json, which `kit.sglang.flags` uses whenever the real
parser cannot run; kit/tests/sglang/test_flags.py re-derives a release and compares.

    python -m kit.derive.flag_scan 0.5.23            # print the derived table's summary
    python -m kit.derive.flag_scan --write 0.5.17 0.5.23
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from kit.findings import KitInputError
from kit.sglang.versions import DEFAULT_RELEASE

# `describe(parser)`: every option of an argparse parser as the kit's flag tables store them (option strings, dest,
# action kind, nargs, value parser, choices, default, const); the head of each engine's parser worker
DESCRIBE = r"""
import argparse, json

BUILTIN = {argparse._StoreAction: "store", argparse._StoreConstAction: "store_const",
           argparse._StoreTrueAction: "store_true", argparse._StoreFalseAction: "store_false",
           argparse._AppendAction: "append", argparse._AppendConstAction: "append_const",
           argparse._CountAction: "count", argparse._HelpAction: "help", argparse._VersionAction: "version"}
BUILTIN[argparse.BooleanOptionalAction] = "boolean_optional"
if hasattr(argparse, "_ExtendAction"):
    BUILTIN[argparse._ExtendAction] = "extend"

def jsonable(v):
    try:
        json.dumps(v)
        return v
    except (TypeError, ValueError):
        return {"repr": repr(v)}

def type_name(t):
    if t is None:
        return None
    mod = getattr(t, "__module__", None) or "?"
    return f"{mod}.{getattr(t, '__qualname__', getattr(t, '__name__', repr(t)))}"

def choices_of(a):
    if a.choices is None:
        return None
    seq = sorted(a.choices) if isinstance(a.choices, (set, frozenset)) else a.choices  # a set: a stable order
    return [jsonable(c) for c in seq]

def describe(parser):
    out = []
    for a in parser._actions:
        if not a.option_strings:
            continue
        kind = BUILTIN.get(type(a)) or "custom:" + type(a).__name__
        out.append({"option_strings": list(a.option_strings), "dest": a.dest, "kind": kind,
                    "nargs": a.nargs, "type": type_name(a.type),
                    "choices": choices_of(a),
                    "default": jsonable(a.default), "const": jsonable(getattr(a, "const_value", a.const)),
                    "required": bool(a.required), "new_flag": getattr(a, "new_flag", None)})
    return out
"""
# Runs inside the release's interpreter; prints one JSON document as its last stdout line.
_WORKER = (
    DESCRIBE
    + r"""
import importlib.metadata as md, pathlib, re, sys
import sglang
from sglang.srt.server_args import ServerArgs

parser = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
actions = describe(parser)
positionals = [a.dest for a in parser._actions if not a.option_strings]

dist = md.distribution("sglang")
scripts = {}
for ep in dist.entry_points:
    if ep.group == "console_scripts":
        scripts[ep.name] = ep.value
root = pathlib.Path(sglang.__file__).parent
launch_modules, server_arg_modules = [], []
for p in sorted(root.rglob("*.py")):
    text = p.read_text(errors="ignore")
    m = re.search(r'^if __name__ == "__main__":\n(.*)', text, re.S | re.M)
    if not m or "test" in p.parts:
        continue
    mod = ".".join(p.relative_to(root.parent).with_suffix("").parts)
    main = m.group(1)
    if "prepare_server_args(" in main:
        server_arg_modules.append(mod)
        if re.search(r"\b(run_server|launch_server)\(", main):
            launch_modules.append(mod)
cli = root / "cli"
serve_text = (cli / "serve.py").read_text() if (cli / "serve.py").exists() else ""
main_text = (cli / "main.py").read_text() if (cli / "main.py").exists() else ""
console = {}
for name, target in scripts.items():
    if target == "sglang.cli.main:main" and '"serve"' in main_text:
        console[name] = "serve"
entry = {"console_scripts": console, "all_console_scripts": scripts, "launch_modules": launch_modules,
         "server_arg_modules": server_arg_modules,
         "serve_strips": ["--model-type"] if '"--model-type"' in serve_text else [],
         "serve_positional": "_normalize_positional_model_path" in serve_text}
parser.parse_known_args(["--model-path", "m"])
# the third-party distributions this needed that the side environment itself holds (not the parent's)
import sysconfig
own = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()
names = md.packages_distributions()
closure = {}
for top in sorted({m.split(".")[0] for m in list(sys.modules)}):
    for dname in names.get(top, []):
        d = md.distribution(dname)
        if pathlib.Path(d.locate_file("")).resolve() == own and d.metadata["Name"].lower() != "sglang":
            closure[d.metadata["Name"]] = d.version
print()
print(json.dumps({"version": dist.version, "closure": closure, "python": sys.version.split()[0], "actions": actions,
                  "positionals": positionals, "entry": entry}))
"""
)


# Prepended to _WORKER for a release read from its wheel source: that source first on sys.path, the packages of
# the interpreter running it after it, an inert stand-in for every module neither has (GPU kernels, vLLM...).
_FROM_SOURCE = r"""
import sys, importlib.util
sys.path.insert(0, {root!r})
_spec = importlib.util.spec_from_file_location("kit_stand_ins", {stand_ins!r})
_si = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_si)
_si.install_named({roots!r})
import io as _io
_REAL = sys.stdout
_OUT = sys.stdout = _io.StringIO()
"""
# and appended: what was stood in for (the closure of a side environment means nothing here)
_FROM_SOURCE_TAIL = r"""
doc = json.loads(_OUT.getvalue().strip().splitlines()[-1])
doc["closure"] = None
doc["stood_in"] = {roots!r}
sys.stdout = _REAL
print()
print(json.dumps(doc))
"""


def derive_from_source(version: str, python: str | None = None, stand_ins_first: tuple = ()) -> dict[str, Any]:
    """The flag table of one release from its wheel's source (kit.sglang.source), run by `python` (this
    interpreter by default) over its own packages, with inert stand-ins for the modules it lacks; the parser is
    SGLang's own `ServerArgs.add_cli_args`. Raises KitInputError with the release's own import error when its
    code needs packages (e.g. an older transformers) that the interpreter does not have. An installed package is
    never stood in for (the stand-ins' finder comes last)."""
    from kit.models import cache_dir, cache_lock
    from kit.sglang.source import download_wheel
    from kit.sglang.stand_ins import __file__ as stand_ins

    root = cache_dir() / "sglang-src" / version  # its source with the wheel's METADATA and entry_points.txt
    if not list(root.glob("sglang-*.dist-info/METADATA")):  # a folder cached without them is fetched again
        with cache_lock(root):
            if not list(root.glob("sglang-*.dist-info/METADATA")):
                download_wheel(version, root)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    roots: list[str] = list(stand_ins_first)  # e.g. what the previous release needed: fewer rounds
    for _ in range(16):  # each round stands in for one more module the source imports that is not installed
        code = (_FROM_SOURCE + _WORKER + _FROM_SOURCE_TAIL).replace("{root!r}", repr(str(root)))
        code = code.replace("{stand_ins!r}", repr(stand_ins)).replace("{roots!r}", repr(sorted(roots)))
        r = subprocess.run(
            [python or sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd="/", env=env
        )
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        m = re.match(r"ModuleNotFoundError: No module named '([\w.]+)'", tail)
        if r.returncode == 0 or not m or m.group(1).split(".")[0] in roots + ["sglang"]:
            break
        roots.append(m.group(1).split(".")[0])
    if r.returncode != 0:
        raise KitInputError(f"sglang {version}: its parser could not be read from the wheel source ({tail})")
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    if doc["version"] != version:
        raise KitInputError(f"{root} holds sglang {doc['version']}, not {version}")
    return doc


def derive(version: str, python: str | None = None) -> dict[str, Any]:
    """The flag table of one release, from its real parser in its side environment."""
    from kit.findings import KitInputError
    from kit.sglang.parser import in_process_version, side_python

    py = python or (sys.executable if in_process_version() == version else side_python(version))
    r = subprocess.run([py, "-c", _WORKER], capture_output=True, text=True, timeout=600, cwd="/")
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise KitInputError(f"sglang {version}: the flag scan did not run in {py} ({tail})")
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    if doc["version"] != version:
        raise KitInputError(f"{py} has sglang {doc['version']}, not {version}")
    return doc


def derive_row(version: str) -> dict[str, Any]:
    """V's flag row: its real parser when its side environment is built here (`python -m kit.sglang.releases
    --side-env V` builds it), else `ServerArgs.add_cli_args` read from the wheel's source, else why neither could
    be read ({"missing": why}: doctor says so rather than borrow another release's table)."""
    from kit.sglang.flags import recorded_closure
    from kit.sglang.parser import venv_name
    from kit.venvs import is_built

    try:
        if is_built(venv_name(version), recorded_closure(version)):
            return derive(version)
        return derive_from_source(version)
    except Exception as e:  # noqa: BLE001 - any failure of the release's own import chain is its reason
        return {"missing": str(e)}


def stored(path: Path | None = None) -> dict[str, dict]:
    """The repository's rows ("actions" expanded from the file's pool), without rows derived on this machine."""
    from kit.derive import read_rows
    from kit.sglang.flags import TABLE_PATH

    path = path or TABLE_PATH
    pool = json.loads(path.read_text()).get("actions", [])
    out = {}
    for v, r in read_rows(path).items():
        acts = r.get("actions")
        out[v] = {**r, "actions": [pool[i] for i in acts]} if acts and isinstance(acts[0], int) else r
    return out


def add_rows(rows: dict[str, dict], path: Path | None = None) -> bool:
    """Store these releases' rows in server_flags.json, every other release's row as it was; True when it changed."""
    return write_table({**stored(path), **rows}, path)


def write_table(rows: dict[str, dict], path: Path | None = None) -> bool:
    """kit/sglang/server_flags.json from {version: row}: each distinct action stored once (rows name them by
    index), a row equal to an earlier release's stored as {"same_as": release}. True when the file changed."""
    from kit.derive import dedupe_rows, write_text
    from kit.sglang.flags import TABLE_PATH
    from kit.sglang.versions import sort_versions

    pool: list[dict] = []
    index: dict[str, int] = {}
    out = {}
    for v in sort_versions(rows):
        r = dict(rows[v])
        if "actions" in r:
            ids = []
            for a in r["actions"]:
                key = json.dumps(a, sort_keys=True)
                if key not in index:
                    index[key] = len(pool)
                    pool.append(a)
                ids.append(index[key])
            r["actions"] = ids
        out[v] = r
    doc = {
        "_doc": "generated by `python -m kit.derive.flag_scan --write V...` from each release's real parser "
        "(rows name their actions by index into `actions`); checked by kit/tests/sglang/test_flags.py and "
        "kit/tests/sglang/test_releases.py",
        "actions": pool,
        "versions": dedupe_rows(out),
    }
    return write_text(path or TABLE_PATH, json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--write"]
    if "--write" in sys.argv:
        rows = {}
        for v in args:
            try:
                rows[v] = derive(v)
            except KitInputError:  # no side environment for it: read the parser from the wheel source
                rows[v] = derive_from_source(v)
        add_rows(rows)
    else:
        d = derive(args[0] if args else DEFAULT_RELEASE)
        print(f"sglang {d['version']} (python {d['python']}): {len(d['actions'])} flags; entry points {d['entry']}")
