"""SGLang's command-line flags per release, and launch argv resolved exactly as SGLang's argparse does.

SGLang parses its flags with `argparse` (`ServerArgs.add_cli_args`, `prepare_server_args`): any unambiguous prefix
of a long option is accepted, `--flag=value` works, a repeated flag's last value wins, values go through `type=`
and `choices=`, store_true flags take no value. The kit needs that reading everywhere, even where SGLang cannot be
imported, so:

* `kit/sglang/server_flags.json` records, per release, every action of the real parser (option strings, dest,
  kind, nargs, type, choices, default, const) and its launch entry points (console scripts, `python -m` modules),
  derived by running the real parser once: `python -m kit.derive.flag_scan --write VERSION...`.
* `resolve_flags(flags, version)` rebuilds an `argparse.ArgumentParser` from that table and lets argparse apply
  its own rules, recording every occurrence as written and canonically; each bad occurrence becomes an error
  entry (SGLang's own message) and the rest is still read.
* Tables are handed out under SGLang's current names: where a release stores an option under another dest than
  the newest release (0.4.4-0.5.13 keep `--tp-size` in `tensor_parallel_size`, copied into `tp_size` by
  `from_cli_args`), the dest is the current name (`current_names`), so results say `tp_size` on every release.
* `launch_entry(argv, version)` says whether an argv runs an SGLang server, and where its flags start.

    from kit.sglang.flags import resolve_flags, flag_value
    r = resolve_flags(["--speculative-algo", "EAGLE", "--tp", "8"], "0.5.23")
    r.values["speculative_algorithm"], r.errors          # 'EAGLE', []

Python's own argparse does the matching; SGLang's servers run Python 3.10-3.12, whose long-option rules agree.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kit.sglang.versions import default_release, pick_recorded, sort_versions, stored_rows

TABLE_PATH = Path(__file__).with_name("server_flags.json")
# value parsers the table names (module.qualname) -> what they do; others are read as strings
KNOWN_TYPES = {"builtins.int": int, "builtins.float": float, "builtins.str": str, "json.loads": json.loads}
PYTHON_PROG = re.compile(r"^(python|pypy)(\d+(\.\d+)*)?[dmtw]?$")  # python, python3, python3.11, pythonw


@lru_cache(maxsize=1)
def _stored() -> dict[str, dict]:
    """Every release's row: a table ("actions" expanded from the file's pool of distinct actions, which rows
    name by index) or {"missing": why its parser could not be read}."""
    doc = json.loads(TABLE_PATH.read_text())
    pool = doc.get("actions", [])
    out = {}
    for v, r in stored_rows(doc["versions"], "flags").items():
        acts = r.get("actions")
        out[v] = {**r, "actions": [pool[i] for i in acts]} if acts and isinstance(acts[0], int) else r
    return out


def _all_tables() -> dict:
    return {v: r for v, r in _stored().items() if "actions" in r}


def has_row(version: str) -> bool:
    """A row for that release: its table, or the recorded reason it has none."""
    return version in _stored()


def missing_reason(version: str) -> str | None:
    """Why the release's parser could not be read from its wheel (so it has no table), or None."""
    return _stored().get(version, {}).get("missing")


def known_versions() -> list[str]:
    """Releases whose real parser the table was derived from."""
    return sort_versions(_all_tables())


def recorded_closure(version: str) -> dict[str, str] | None:
    """{distribution: version} the release's parser imported in its side environment when its table was derived;
    None without a table or for one read from its wheel's source (no side environment involved)."""
    closure = (_all_tables().get(version) or {}).get("closure")
    return dict(closure) if closure else None


@dataclass(frozen=True, eq=False)  # hashed by identity: `_parser` keeps one argparse per table
class FlagTable:
    version: str  # the release asked about
    checked: str  # the release whose parser the table was derived from
    exact: bool
    actions: tuple  # dicts: option_strings, dest (SGLang's current name), kind, nargs, type, choices, default, ...
    entry: dict  # console_scripts, serve_subcommand, launch_modules, serve_strips, serve_positional
    own_dests: dict = field(default_factory=dict)  # current name -> the release's own argparse dest, where they differ

    def by_option(self) -> dict[str, dict]:
        return {o: a for a in self.actions for o in a["option_strings"]}

    def by_dest(self) -> dict[str, dict]:
        return {a["dest"]: a for a in self.actions}


def current_names(actions: list[dict], newest: list[dict]) -> dict[str, str]:
    """{a release's argparse dest: SGLang's current name} for the dests that differ: an action's current name is
    the dest the newest recorded release stores any of its option strings under. A dest is left as it is where
    its options reach several current names, or where the name is taken by another action of the release.

    >>> current_names([{"dest": "tensor_parallel_size", "option_strings": ["--tensor-parallel-size", "--tp-size"]}],
    ...               [{"dest": "tp_size", "option_strings": ["--tp-size", "--tensor-parallel-size"]}])
    {'tensor_parallel_size': 'tp_size'}
    """
    now = {o: a["dest"] for a in newest for o in a["option_strings"]}
    own = {a["dest"] for a in actions}
    cand = {}
    for a in actions:
        names = {now[o] for o in a["option_strings"] if o in now}
        if len(names) == 1 and (name := names.pop()) != a["dest"] and name not in own:
            cand[a["dest"]] = name
    hits = list(cand.values())
    return {d: n for d, n in cand.items() if hits.count(n) == 1}


@lru_cache(maxsize=16)
def table_for(version: str | None = None) -> FlagTable:
    """The flag table of that release, else of the nearest older release that has one (exact=False), its dests
    under SGLang's current names (`current_names`)."""
    tables = _all_tables()
    rec = pick_recorded(version or default_release(), tables)
    t = tables[rec.checked]
    names = current_names(t["actions"], tables[sort_versions(tables)[-1]]["actions"])
    actions = tuple({**a, "dest": names[a["dest"]]} if a["dest"] in names else a for a in t["actions"])
    own = {n: d for d, n in names.items()}
    return FlagTable(rec.requested, rec.checked, rec.exact, actions, t["entry"], own)


# ServerArgs fields that cap CUDA-graph capture, the current spelling first: releases that split the decode and
# prefill caps keep `--cuda-graph-max-bs` only as a deprecated alias (0.5.17 warns on it)
DECODE_GRAPH_CAP = ("cuda_graph_max_bs_decode", "cuda_graph_max_bs")
PREFILL_GRAPH_CAP = ("cuda_graph_max_bs_prefill", "piecewise_cuda_graph_max_tokens")


# the flags that send every forward through eager Python, prefill and decode (no CUDA graph replay), newest
# spelling first: 0.5.17 deprecates --disable-cuda-graph for one backend choice per phase
GRAPHS_OFF = (
    ("--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"),
    ("--disable-cuda-graph",),
)
# switches that compile forwards (torch.compile, piecewise CUDA graphs where a release makes them opt-in): off
# with GRAPHS_OFF, so that Python hooks on the model see every forward
COMPILE_ON = ("--enable-torch-compile", "--enable-piecewise-cuda-graph")


def graphs_off(version: str | None = None) -> list[str]:
    """The release's flags for no CUDA graphs at all (the first spelling of GRAPHS_OFF whose options it has).

    >>> graphs_off("0.5.17"), graphs_off("0.5.2")
    (['--cuda-graph-backend-decode', 'disabled', '--cuda-graph-backend-prefill', 'disabled'], ['--disable-cuda-graph'])
    """
    opts = table_for(version).by_option()
    for flags in GRAPHS_OFF:
        if all(f in opts for f in flags if f.startswith("--")):
            return list(flags)
    return []


def current_option(fields: tuple[str, ...], version: str | None = None) -> str | None:
    """The option string of the first of `fields` (ServerArgs names, current spelling first) that the release's
    parser has; None when it has none of them.

    >>> current_option(DECODE_GRAPH_CAP, "0.5.17"), current_option(DECODE_GRAPH_CAP, "0.5.2")
    ('--cuda-graph-max-bs-decode', '--cuda-graph-max-bs')
    """
    opts = table_for(version).by_option()
    return next((o for f in fields if (o := "--" + f.replace("_", "-")) in opts), None)


# -- entry points -------------------------------------------------------------------------------
def launch_entry(argv: list[str], version: str | None = None) -> tuple[str, int] | None:
    """(entry point, index where the server flags start) when argv launches an SGLang server."""
    if not argv:
        return None
    ent = table_for(version).entry
    prog = os.path.basename(argv[0])
    if PYTHON_PROG.match(prog):
        j = 1
        while j < len(argv):
            a = argv[j]
            if a == "-m" or (a.startswith("-m") and len(a) > 2):
                mod, k = (argv[j + 1] if j + 1 < len(argv) else "", j + 2) if a == "-m" else (a[2:], j + 1)
                return (f"python -m {mod}", k) if mod in ent["launch_modules"] else None
            if a in ("-c", "-"):
                return None
            if a.startswith("-"):
                j += 2 if a in ("-W", "-X", "-Q") else 1
                continue
            path = a.replace("\\", "/")
            mods = [m for m in ent["launch_modules"] if path.endswith(m.replace(".", "/") + ".py")]
            return (f"python {mods[0].replace('.', '/')}.py", j + 1) if mods else None
        return None
    if prog in ent["console_scripts"]:
        sub = ent["console_scripts"][prog]
        if sub is None:
            return (prog, 1)
        if argv[1:2] == [sub]:
            return (f"{prog} {sub}", 2)
    return None


def server_command(python: str, version: str | None = None) -> list[str]:
    """The entry the release recommends for starting its server under `python`: its console script with a server
    subcommand (`sglang serve`; `python -m sglang.launch_server` warns it is recommended) beside the interpreter or
    in the bin folder the kit's bundle wrote for it (`kit.sglang.bundle.write_console_scripts`), else `python -m
    sglang.launch_server`."""
    import shutil

    from kit.sglang.bundle_site import SCRIPTS_DIR, installed_bundle_site

    ent = table_for(version).entry
    where = python if os.sep in python else shutil.which(python)
    site = installed_bundle_site()
    for script, sub in ent["console_scripts"].items():
        if not sub:
            continue
        beside = os.path.join(os.path.dirname(where), script) if where else None
        if beside and os.access(beside, os.X_OK):
            return [beside, sub]
        bundled = site / SCRIPTS_DIR / script if site else None
        if bundled and os.access(bundled, os.X_OK) and where and _runs_under(bundled, where):
            return [str(bundled), sub]
    return [python, "-m", ent["launch_modules"][0]]


def _runs_under(script: Path, python: str) -> bool:
    """Does `script`'s first line name `python`? Paths are compared as written, links not followed: two virtual
    environments' interpreters link to one file but see different packages."""
    with open(script, "rb") as f:
        first = f.readline().decode(errors="replace").strip()
    return first.startswith("#!") and os.path.abspath(first[2:].strip()) == os.path.abspath(python)


def server_flags(argv: list[str], version: str | None = None) -> tuple[list[str], list[str]]:
    """(flags SGLang's server parser sees, tokens the entry point consumed itself) for a launch argv: `sglang serve`
    removes `--model-type X` and turns a leading positional into `--model-path` (cli/serve.py), as recorded."""
    hit = launch_entry(argv, version)
    if hit is None:
        return list(argv), []
    entry, k = hit
    flags, own = list(argv[k:]), []
    ent = table_for(version).entry
    if entry.endswith(" serve"):
        strips, out, i = ent.get("serve_strips", []), [], 0
        while i < len(flags):
            n = 2 if flags[i] in strips and i + 1 < len(flags) else 1
            taken = n == 2 or any(flags[i].startswith(s + "=") for s in strips)
            (own if taken else out).extend(flags[i : i + n])
            i += n
        flags = out
        if ent.get("serve_positional") and flags and not flags[0].startswith("-"):
            flags = ["--model-path"] + flags
    return flags, own


# -- resolution ---------------------------------------------------------------------------------
@dataclass
class Occurrence:
    dest: str  # SGLang's current name (`table_for`)
    written: str  # the option string argparse matched (an alias or the full name; prefixes are expanded)
    canonical: str  # the option's first spelling in SGLang's parser
    raws: list[str]  # the value strings it consumed


@dataclass
class FlagResolution:
    table: FlagTable  # what judged the flags: its release (`version`), the one it was derived from (`checked`)
    values: dict[str, Any] = field(default_factory=dict)  # dest (current name) -> value SGLang ends with, given flags
    occurrences: list[Occurrence] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # tokens no flag takes
    errors: list[dict] = field(default_factory=list)  # {"option", "message", "tokens"}
    flags: list[str] = field(default_factory=list)  # what was read
    unchecked: list[str] = field(default_factory=list)  # dests whose value parser the kit does not have

    @property
    def version(self) -> str:
        return self.table.version

    @property
    def checked(self) -> str:
        return self.table.checked

    @property
    def exact(self) -> bool:
        return self.table.exact

    def raw(self, dest: str) -> str | None:
        """The value string of the last occurrence of dest (what `--flag V` said), or None."""
        o = next((o for o in reversed(self.occurrences) if o.dest == dest), None)
        return " ".join(o.raws) if o and o.raws else None

    def canonical_args(self, skip: set = frozenset()) -> list[str]:
        """Every occurrence outside `skip`, spelled canonically, in order."""
        return [s for o in self.occurrences if o.dest not in skip for s in [o.canonical, *o.raws]]

    def abbreviated(self) -> list[tuple[str, str]]:
        """(as written, full option) for every flag given as an unambiguous prefix of its name."""
        opts = self.table.by_option()
        out = []
        for tok in self.flags:
            opt = tok.split("=", 1)[0]
            if not opt.startswith("--") or opt in opts:
                continue
            hits = {id(a): o for o, a in opts.items() if o.startswith(opt)}
            if len(hits) == 1:
                out.append((opt, opts[next(iter(hits.values()))]["option_strings"][0]))
        return out


class _Stop(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Stop(message)


_KINDS = {
    "store": argparse._StoreAction,
    "store_const": argparse._StoreConstAction,
    "store_true": argparse._StoreTrueAction,
    "store_false": argparse._StoreFalseAction,
    "append": argparse._AppendAction,
    "append_const": argparse._AppendConstAction,
    "count": argparse._CountAction,
    "extend": getattr(argparse, "_ExtendAction", argparse._AppendAction),
    "boolean_optional": argparse.BooleanOptionalAction,
}


class _NoStore(argparse.Action):
    """A flag whose action stores nothing (SGLang's `DeprecatedAction`: a warning only)."""

    def __call__(self, parser, namespace, values, option_string=None):
        pass


def _recording(base):
    class Recording(base):
        def __call__(self, parser, namespace, values, option_string=None):
            raws = list(parser.kit_raws)
            parser.kit_raws.clear()
            parser.kit_seen.append(Occurrence(self.dest, option_string or "", self.option_strings[0], raws))
            super().__call__(parser, namespace, values, option_string)

    Recording.__name__ = base.__name__
    return Recording


def _value_parser(name: str | None, parser: _Parser):
    fn = KNOWN_TYPES.get(name or "builtins.str", str)

    def conv(s: str):
        parser.kit_raws.append(s)
        return fn(s)

    conv.__name__ = getattr(fn, "__name__", "str")  # argparse names the type in its messages
    return conv


@lru_cache(maxsize=8)
def _parser(t: FlagTable) -> _Parser:
    """argparse rebuilt from the table: same option strings, dests, kinds, nargs, types and choices.
    Defaults are suppressed (only given flags appear) and nothing is required (checked after parsing)."""
    p = _Parser(prog="sglang serve", add_help=False, exit_on_error=False, argument_default=argparse.SUPPRESS)
    p.kit_raws, p.kit_seen = [], []
    for a in t.actions:
        kind, opts = a["kind"], list(a["option_strings"])
        kw: dict[str, Any] = {"dest": a["dest"]}
        if kind in ("help", "version"):
            kind = "store_true"
        if kind == "custom:DeprecatedAction":
            p.add_argument(*opts, action=_recording(_NoStore), nargs=0, **kw)
            continue
        if kind not in _KINDS:  # another custom Action class: a store, or a constant when it takes no value
            kind = "store_const" if a["nargs"] == 0 else "store"
        if kind == "boolean_optional":  # argparse adds the --no- spellings itself
            opts = [o for o in opts if not (o.startswith("--no-") and "--" + o[5:] in opts)]
        elif kind in ("store", "append", "extend"):
            kw.update({k: a[k] for k in ("nargs", "choices") if a.get(k) is not None})
            if a["nargs"] == "?":
                kw["const"] = a.get("const")
            kw["type"] = _value_parser(a.get("type"), p)
        elif kind in ("store_const", "append_const"):
            kw["const"] = a.get("const")
        p.add_argument(*opts, action=_recording(_KINDS[kind]), **kw)
    return p


def _matches(token: str, action: dict, options: dict[str, dict]) -> bool:
    opt = token.split("=", 1)[0]
    if opt in options:
        return options[opt] is action
    cands = {id(a): a for o, a in options.items() if o.startswith(opt) and opt.startswith("--")}
    return len(cands) == 1 and next(iter(cands.values())) is action


def _span(argv: list[str], i: int, action: dict | None) -> int:
    """End of the occurrence starting at argv[i]: the option and the values it would take."""
    j, nargs = i + 1, action["nargs"] if action else "*"
    if "=" in argv[i] or nargs == 0:
        return j
    limit = 1 if nargs in (None, "?") else nargs if isinstance(nargs, int) else len(argv)
    while j < min(len(argv), i + 1 + limit) and (_NUM.match(argv[j]) or not argv[j].startswith("-")):
        j += 1
    return j


_NUM = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _occurrences(argv: list[str], options: dict[str, dict]) -> Iterator[tuple[str, list[str]]]:
    """(name, words) of each option in `argv` with the values it would take (`_span` over `options`), and of each
    word no option takes, alone."""
    i = 0
    while i < len(argv):
        name = argv[i].split("=", 1)[0]
        j = _span(argv, i, options.get(name)) if name.startswith("-") else i + 1
        yield name, argv[i:j]
        i = j


def drop_flags(argv: list[str], prefix: str, version: str | None = None) -> list[str]:
    """`argv` without every option starting with `prefix`, each with the values it takes as that release's parser
    reads them (`_span`)."""
    occurrences = _occurrences(argv, table_for(version).by_option())
    return [w for name, words in occurrences if not name.startswith(prefix) for w in words]


def known_flags(argv: list[str], table: FlagTable) -> list[str]:
    """The options of `argv` that `table`'s parser takes, each with its values."""
    options = table.by_option()
    return [w for name, words in _occurrences(argv, options) if name in options for w in words]


def resolve_flags(flags: list[str], version: str | None = None, table: FlagTable | None = None) -> FlagResolution:
    """Read server flags as SGLang's argparse does (or as `table`'s engine does: another engine's parser recorded
    in the same form); faults become `errors`, the rest is still read."""
    t = table or table_for(version)
    p = _parser(t)
    res = FlagResolution(t, flags=list(flags))
    options = t.by_option()
    rest = list(flags)
    for _ in range(len(flags) + 1):
        p.kit_raws.clear()
        p.kit_seen = []
        try:
            ns, unknown = p.parse_known_args(rest)
        except (argparse.ArgumentError, _Stop) as e:
            msg, name = str(e), getattr(e, "argument_name", None)
            cut = _culprit(rest, name, msg, options, p)
            if cut is None:  # cannot locate: report and keep the flags unread
                res.errors.append({"option": name, "message": msg, "tokens": list(rest)})
                res.unknown += rest
                return res
            i, j = cut
            res.errors.append({"option": name or rest[i].split("=", 1)[0], "message": msg, "tokens": rest[i:j]})
            rest = rest[:i] + rest[j:]
            continue
        res.values, res.occurrences = vars(ns), list(p.kit_seen)
        res.unknown += unknown
        break
    missing = [a for a in t.actions if a["required"] and a["dest"] not in res.values]
    if missing:  # argparse's own wording, raised after everything else was read
        msg = "the following arguments are required: " + ", ".join("/".join(a["option_strings"]) for a in missing)
        res.errors.append({"option": missing[0]["option_strings"][0], "tokens": [], "message": msg})
    res.unchecked = sorted(
        {o.dest for o in res.occurrences if (t.by_dest()[o.dest].get("type") or "builtins.str") not in KNOWN_TYPES}
    )
    return res


def _culprit(rest: list[str], name: str | None, msg: str, options: dict, p: _Parser) -> tuple[int, int] | None:
    """(start, end) of the occurrence in `rest` that raised, or None."""
    if name:
        action = next((a for o, a in options.items() if o in name.split("/")), None)
        for i, tok in enumerate(rest):
            if tok.startswith("-") and action is not None and _matches(tok, action, options):
                j = _span(rest, i, action)
                try:
                    p.kit_raws.clear()
                    p.parse_known_args(rest[i:j])
                except (argparse.ArgumentError, _Stop):
                    return i, j
        return None
    m = re.match(r"ambiguous option: (\S+) could match", msg)
    if m and m.group(1) in rest:
        i = rest.index(m.group(1))
        return i, _span(rest, i, None)
    return None


def flag_value(argv: list[str], name: str, version: str | None = None) -> str | None:
    """The value string SGLang reads for `name` (e.g. "--speculative-algorithm") from a launch argv or
    bare flags — prefixes, `=` forms and repetition resolved — or None when not given."""
    t = table_for(version)
    a = t.by_option().get(name)
    if a is None:  # not a flag of that release: SGLang could not have read it
        return None
    flags, _ = server_flags(argv, version)
    r = resolve_flags(flags, version)
    if a["dest"] not in r.values:
        return None
    raw = r.raw(a["dest"])
    return str(r.values[a["dest"]]) if raw is None else raw  # None: a store_true/const flag
