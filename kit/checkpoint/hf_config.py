"""Read HF-style `config.json` files: a model directory or a lone config file, no weights needed.

A 1T-parameter target must be checkable on a laptop, so every static check takes its
architecture facts from here. Errors are `KitInputError`s naming the file and the problem.

    cfg, model_dir = read_config("path/to/model_or_config.json")   # cfg: kit.hf.HFConfig
    facts = target_facts(cfg)       # TargetFacts(architecture, num_layers, hidden_size)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from kit.config import missing_path
from kit.findings import KitInputError
from kit.hf import HFConfig
from kit.sglang.draft_config import read_draft_config


def read_config(path: str | Path) -> tuple[HFConfig, Path | None]:
    """Return (the parsed config, model directory or None when given a lone config file)."""
    src = Path(path)
    p = src / "config.json" if src.is_dir() else src
    if not p.exists() and src.is_dir():
        raise KitInputError(f"{p}: no such file (a model directory holds its config.json)")
    if not p.exists():
        raise KitInputError(missing_path(str(path), what="a model directory or a config.json"))
    try:
        cfg = json.loads(p.read_text())
    except UnicodeDecodeError:
        raise KitInputError(f"{p}: not a text file")
    except json.JSONDecodeError as e:
        raise KitInputError(f"{p}: invalid JSON ({e.msg} at line {e.lineno})")
    if not isinstance(cfg, dict):
        raise KitInputError(f"{p}: expected a JSON object at the top level")
    return HFConfig(cfg, p), (src if src.is_dir() else None)


def text_config(cfg: HFConfig) -> HFConfig:
    """The language-model part of a config: multimodal wrappers (Kimi-K2.5, Llava...) nest it."""
    return HFConfig.of(cfg).text


def declared_draft(cfg: HFConfig):
    """A draft config as its writing stack declares it (`kit.sglang.draft_config.DraftConfig`): a speculators
    config's nested layer config, else the language-model part of the config."""
    cfg = HFConfig.of(cfg)
    return read_draft_config(cfg if cfg.is_speculators else cfg.text)


class TargetFacts(NamedTuple):
    """What the wiring rules read from a target's config.json (None: not declared, or no target)."""

    architecture: str | None  # architectures[0]: the class SGLang's capture rule is looked up by
    num_layers: int | None  # the language model's num_hidden_layers (L: capture point L = final state)
    hidden_size: int | None  # the width a captured hidden state has


def target_facts(cfg: HFConfig | None) -> TargetFacts:
    cfg = HFConfig.of(cfg)
    return TargetFacts(cfg.architecture, cfg.text.get("num_hidden_layers"), cfg.text.get("hidden_size"))
