"""`HFConfig`: one parsed HF-style `config.json` (a target's or a draft's), read-only, with the file it came from.

The one type the static rules take for a config they did not write: a read-only `Mapping` (keys as the writing stack
spelled them) plus typed accessors for facts several rules share. Reading: `kit.checkpoint.hf_config.read_config`;
typed facts: `kit.sglang.draft_config.DraftConfig`, `kit.checkpoint.hf_config.TargetFacts`.

    cfg = HFConfig.of({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 30})
    cfg.architecture, cfg.text.get("num_hidden_layers"), cfg.to_dict()
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# where multimodal wrappers (Kimi-K2.5, Llava...) nest the language model's config
TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config")
# the fields a config.json gives its routed experts in (DeepSeek/Kimi, Qwen-MoE, Mixtral), and an EAGLE-3 draft config
# its aux layer ids in (top level, or under `eagle_config`)
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
AUX_IDS = "eagle_aux_hidden_state_layer_ids"


@dataclass(frozen=True, eq=False)
class HFConfig(Mapping[str, Any]):
    """A parsed config.json (`data`) and the file it was read from (`path`, None when built in code)."""

    data: Mapping[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @classmethod
    def of(cls, cfg: HFConfig | Mapping[str, Any] | None, path: Path | None = None) -> HFConfig:
        """Wrap a parsed config (an HFConfig passes through unchanged; None is the empty config)."""
        return cfg if isinstance(cfg, HFConfig) else cls(dict(cfg or {}), path)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def to_dict(self) -> dict[str, Any]:
        """A deep copy as a plain dict: for writing out, or for building a changed config."""
        return copy.deepcopy(dict(self.data))

    @property
    def architecture(self) -> str | None:
        """architectures[0]: the class a loader dispatches on (None: not declared)."""
        return (self.data.get("architectures") or [None])[0]

    @property
    def text(self) -> HFConfig:
        """The language-model part: a nested text config when a multimodal wrapper has one, else itself."""
        nested = next((self.data[k] for k in TEXT_CONFIG_KEYS if isinstance(self.data.get(k), Mapping)), None)
        return self if nested is None else HFConfig(nested, self.path)

    @property
    def is_speculators(self) -> bool:
        """A speculators-layout draft config (decoder numbers nested under transformer_layer_config)."""
        return "transformer_layer_config" in self.data or "speculators_model_type" in self.data


def hub_cache() -> Path:
    """huggingface_hub's cache folder: HF_HUB_CACHE, else HF_HOME/hub, else its default."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(constants.HF_HUB_CACHE)
