"""Dataclass <-> argparse mapping. Run: python -m pytest kit/tests/test_config.py"""

import argparse
from dataclasses import dataclass, field

from kit.config import add_arguments, from_namespace


@dataclass
class Cfg:
    num_steps: int = field(default=3, metadata={"help": "steps"})
    name: str | None = None
    verbose: bool = False
    sizes: list[int] | None = None
    path: str = field(default="", metadata={"positional": True})


def test_flags_map_one_to_one():
    p = add_arguments(argparse.ArgumentParser(), Cfg)
    cfg = from_namespace(Cfg, p.parse_args(["x", "--num-steps", "5", "--verbose", "--sizes", "1", "2"]))
    assert cfg == Cfg(num_steps=5, name=None, verbose=True, sizes=[1, 2], path="x")
    assert from_namespace(Cfg, p.parse_args(["y"])) == Cfg(path="y")
    assert from_namespace(Cfg, p.parse_args(["y", "--no-verbose"])).verbose is False
