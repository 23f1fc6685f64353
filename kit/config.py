"""Typed configuration: one dataclass per verb, mapped one-to-one onto CLI flags and notebook parameters.

Every verb declares a dataclass; `add_arguments(parser, Cls)` turns each field into a
kebab-case flag (`num_steps` -> `--num-steps`) with the field's `help` metadata, and
`from_namespace(Cls, ns)` builds the dataclass back. A notebook's `parameters` cell uses the
same field names, so `Cls(**params)` is the notebook twin of the command line.

    @dataclass
    class OracleConfig:
        num_steps: int = field(default=3, metadata={"help": "draft steps per verify"})

Field types understood: bool (store_true / --no-x), int, float, str, Optional[...] of those,
and list[...] of those (nargs="+"). A field with metadata {"positional": True} is positional.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


def _base_type(tp):
    """Return (python scalar type, is_list) for a field annotation, unwrapping Optional."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _base_type(args[0])
    if origin in (list, tuple):
        return typing.get_args(tp)[0], True
    return tp, False


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> argparse.ArgumentParser:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("cli") is False:
            continue
        tp, is_list = _base_type(hints[f.name])
        help_ = f.metadata.get("help", "")
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        flag = "--" + f.name.replace("_", "-")
        if f.metadata.get("positional"):
            parser.add_argument(f.name, type=tp, help=help_, nargs="+" if is_list else None)
            continue
        if tp is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=help_)
            continue
        kw: dict[str, Any] = dict(dest=f.name, type=tp, default=default, help=help_)
        if is_list:
            kw["nargs"] = "+"
        if "choices" in f.metadata:
            kw["choices"] = f.metadata["choices"]
        parser.add_argument(flag, **kw)
    return parser


def from_namespace(cls: type[T], ns: argparse.Namespace) -> T:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in vars(ns).items() if k in names})


def to_dict(cfg) -> dict[str, Any]:
    return dataclasses.asdict(cfg)
