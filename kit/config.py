"""Typed configuration: one dataclass per verb, mapped one-to-one onto CLI flags and notebook parameters.

`add_arguments(parser, Cls)` turns each field into a kebab-case flag (`num_steps` -> `--num-steps`) with its `help`
metadata; `from_namespace(Cls, ns)` builds the dataclass back; a notebook's `parameters` cell uses the same names,
so `Cls(**params)` is its twin. Field types: bool (--x / --no-x), int, float, str, Optional and list (nargs="+")
of those; metadata {"positional": True} makes a field positional, {"cli": False} keeps it off the command line;
a dataclass-typed field (`spec: SpecParams`) is flattened into its fields' flags.

    @dataclass
    class OracleConfig:
        max_new_tokens: int = opt("greedy continuation length", 64)

Paths a user names are checked here, before any slow work: `local_path(value, "--target")` returns the path or
raises a one-line `KitInputError`; a Hugging Face hub id where a local directory is needed gets the download
command instead of "no such file".
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import types
import typing
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kit.findings import KitInputError

T = TypeVar("T")


def opt(help_: str, default: Any = None, **meta) -> Any:
    """A dataclass field with its flag's help (and any further metadata: choices, positional, cli)."""
    return dataclasses.field(default=default, metadata={"help": help_, **meta})


def _base_type(tp):
    """Return (python scalar type, is_list) for a field annotation, unwrapping Optional."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _base_type(next(a for a in typing.get_args(tp) if a is not type(None)))
    if origin in (list, tuple):
        return typing.get_args(tp)[0], True
    return tp, False


class _Refused(argparse.Action):
    """A flag this verb knows but does not implement: a one-line error naming it, never a silent no-op."""

    def __init__(self, option_strings, dest, why: str = "", **kw):
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kw)
        self.why = why

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string}: {self.why}")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def _leaves(cls: type, default: Any = None) -> Iterator[tuple[tuple[str, ...], dataclasses.Field, Any, Any]]:
    """(path of attribute names, field, annotation, default) per flag of `cls`, dataclass-typed fields flattened."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        value = _default(f) if default is None else getattr(default, f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            for path, *rest in _leaves(hints[f.name], value):
                yield ((f.name, *path), *rest)
        else:
            yield (f.name,), f, hints[f.name], value


def add_arguments(
    parser: argparse.ArgumentParser,
    cls: type,
    only: Collection[str] | None = None,
    notes: Mapping[str, str] | None = None,
    refuse: str | None = None,
) -> argparse.ArgumentParser:
    """One flag per field of `cls`. With `only`, the other fields' flags are refused when given, with
    the reason `refuse` (hidden from --help). `notes[field]` is appended to that flag's help in brackets."""
    for _, f, hint, default in _leaves(cls):
        flag = "--" + f.name.replace("_", "-")
        if f.metadata.get("cli") is False:
            continue
        if only is not None and f.name not in only:
            if refuse and not f.metadata.get("positional"):
                parser.add_argument(flag, action=_Refused, why=refuse, default=argparse.SUPPRESS)
            continue
        tp, is_list = _base_type(hint)
        help_ = f.metadata.get("help", "") + (f" [{notes[f.name]}]" if notes and f.name in notes else "")
        nargs = "+" if is_list else None
        if f.metadata.get("positional"):
            parser.add_argument(f.name, type=tp, help=help_, nargs=nargs)
        elif tp is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=help_)
        else:
            kw = dict(dest=f.name, type=tp, default=default, help=help_, nargs=nargs)
            parser.add_argument(flag, choices=f.metadata.get("choices"), **kw)
    return parser


def from_namespace(cls: type[T], ns: argparse.Namespace, default: T | None = None) -> T:
    """`cls` from the parsed flags; a dataclass-typed field from its own fields' flags, over its default."""
    hints, given = typing.get_type_hints(cls), vars(ns)
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            kw[f.name] = from_namespace(hints[f.name], ns, _default(f))
        elif f.name in given:
            kw[f.name] = given[f.name]
    return cls(**kw) if default is None else dataclasses.replace(default, **kw)


to_dict = dataclasses.asdict


def to_argv(cfg, skip: Collection[str] = ()) -> list[str]:
    """The flags that rebuild `cfg` from its class's defaults (the inverse of `add_arguments` + `from_namespace`)."""
    out: list[str] = []
    for path, f, hint, default in _leaves(type(cfg)):
        v = functools.reduce(getattr, path, cfg)
        if f.name in skip or v == default or f.metadata.get("cli") is False:
            continue
        flag = "--" + f.name.replace("_", "-")
        tp, is_list = _base_type(hint)
        if tp is bool:
            out.append(flag if v else "--no-" + f.name.replace("_", "-"))
        elif is_list:
            out += [flag, *map(str, v)]
        elif f.metadata.get("positional"):
            out.append(str(v))
        else:
            out += [flag, str(v)]
    return out


# owner/name, as the Hugging Face hub spells a repository id
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_hub_id(value: str) -> bool:
    """Does `value` read as a hub id (owner/name) rather than a local path? (`drafts/x` with a local `drafts/` is a path.)"""
    return bool(_HUB_ID.match(str(value))) and not Path(value).parent.exists()


def missing_path(value: str, flag: str | None = None, what: str = "a local directory or file") -> str:
    """The one-line message for a path that does not exist; a hub id is told how to download it."""
    head = f"{flag} {value}" if flag else str(value)
    if is_hub_id(value):
        return (
            f"{head}: a Hugging Face hub id, where a local directory is needed here; download it "
            f"(hf download {value} --local-dir DIR) and pass {flag or 'the path'} DIR"
        )
    return f"{head}: no such file or directory (expected {what})"


def local_path(value: str, flag: str | None = None, what: str = "a local directory or file") -> Path:
    """`value` as an existing local path, or a one-line KitInputError naming the flag (see `missing_path`)."""
    p = Path(value).expanduser()
    if not p.exists():
        raise KitInputError(missing_path(value, flag, what))
    return p
