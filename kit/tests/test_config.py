"""Dataclass <-> argparse mapping. Run: python -m pytest kit/tests/test_config.py"""

import argparse
from dataclasses import dataclass, field

import pytest

from kit.config import add_arguments, from_namespace, local_path, missing_path, to_argv
from kit.findings import KitInputError
from kit.sglang.params import SpecParams


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


@dataclass
class Spec:
    model_path: str = field(default="embedded", metadata={"help": "target"})
    tp_size: int | None = field(default=None, metadata={"help": "tensor parallel size"})
    port: int | None = field(default=None, metadata={"help": "port"})


def test_only_refuses_the_other_flags_and_notes_mark_help(capsys):
    p = add_arguments(argparse.ArgumentParser(prog="kit serve"), Spec, only={"model_path", "port"}, refuse="not here")
    assert from_namespace(Spec, p.parse_args(["--port", "1"])) == Spec(port=1)
    with pytest.raises(SystemExit):
        p.parse_args(["--tp-size", "2"])
    assert "--tp-size: not here" in capsys.readouterr().err
    assert "--tp-size" not in p.format_help()
    q = add_arguments(argparse.ArgumentParser(), Spec, notes={"tp_size": "SGLang only"})
    assert "tensor parallel size [SGLang only]" in " ".join(q.format_help().split())


@dataclass
class Nested:
    spec: SpecParams = field(default_factory=lambda: SpecParams(3, 1, 4))
    quick: bool = False


def test_a_dataclass_field_is_its_own_fields_flags_with_the_outer_default():
    p = add_arguments(argparse.ArgumentParser(), Nested)
    assert from_namespace(Nested, p.parse_args([])) == Nested()
    cfg = from_namespace(Nested, p.parse_args(["--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]))
    assert cfg == Nested(spec=SpecParams(3, 4, 8))
    assert to_argv(cfg) == ["--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]
    assert from_namespace(Nested, p.parse_args(to_argv(cfg))) == cfg
    help_ = p.format_help()
    assert "--speculative-num-steps SPECULATIVE_NUM_STEPS" in help_ and "--spec " not in help_
    only = add_arguments(argparse.ArgumentParser(), Nested, only={"quick"}, refuse="not here")
    assert from_namespace(Nested, only.parse_args([])) == Nested()  # flags not registered: the outer default


def test_local_path_explains_hub_ids(tmp_path):
    assert local_path(str(tmp_path), "--target") == tmp_path
    with pytest.raises(KitInputError, match=r"^--draft /nonexistent/d: no such file or directory \(expected"):
        local_path("/nonexistent/d", "--draft")
    with pytest.raises(KitInputError, match="a Hugging Face hub id, where a local directory is needed") as e:
        local_path("meta-llama/Llama-3.1-8B-Instruct", "--target")
    assert "hf download meta-llama/Llama-3.1-8B-Instruct --local-dir DIR" in str(e.value)
    assert "pass --target DIR" in str(e.value)
    assert "hub id" not in missing_path("./relative/dir", "--target")  # a relative path is not a hub id
