"""The user's target and draft in miniature: same classes, layer count, vocabulary and context; small widths.

A dress rehearsal runs the user's own deployment on real SGLang in minutes, on one GPU, by loading a
miniature of it: the target from its `config.json` with `--load-format dummy` (no weights), the draft as a
real safetensors file that SGLang's own loader reads. Everything a fault depends on is kept: the target's
architecture class and `model_type` (the capture rule, the forward), its layer count (aux ids keep their
meaning), its vocabulary (the draft's `d2t`/`t2d`, `lm_head`) and context length (`draft.context_short`);
the draft's tensor *names and dtypes* from its safetensors header (what `load_weights` renames, drops or
never fills) and its real `config.json`. Only widths shrink, consistently:

* heads to a multiple of the launch's TP (head_dim kept: attention kernels take a fixed set), kv heads by
  the same GQA ratio and dividing or divisible by TP; hidden = heads x head_dim when the original is, else
  the goal width; intermediate sizes, `q_lora_rank` in proportion, aligned to 64 x TP (the quantization
  block when one is kept); experts down to what the router's top-k and groups need;
* MLA `kv_lora_rank`, `qk_rope_head_dim`, `qk_nope_head_dim`, `v_head_dim` are kept unless
  `shrink_head_dims` (SGLang's MLA kernels serve 512/64 only), which is noted;
* the draft's tensors follow the same shrink by dimension *role* (H, 2H, k x Ht, heads x head_dim, ...), its
  vocabulary maps keep their size; values are random (weights from a normal law, `d2t` zero, `t2d` on the
  first draft-vocabulary tokens): a rehearsal says whether it runs, never how well it accepts.

Quantization is kept where SGLang dummy-loads it (`KEEP_QUANT`), else dropped, with a note either way.

    from kit.rehearsal.miniature import miniature_target, write_miniature_draft
    mini = miniature_target(json.load(open("config.json")), tp=2)      # .config, .sizes, .notes
    write_miniature_draft("DRAFT_DIR", "OUT/draft", mini)              # header-driven, no tensor read
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.checkpoint.processors import PROCESSOR_FILES, STAND_IN_PROCESSORS
from kit.findings import KitInputError
from kit.hf import EXPERT_KEYS, HFConfig

# quantization methods SGLang builds and dummy-loads on a miniature, with the width alignment their kernels
# need (fp8 block scales come in 128 x 128 blocks). Others (mxfp4, compressed-tensors INT4, awq...) are dropped
# until a GPU run shows the kit's bundle dummy-loads them at miniature widths.
KEEP_QUANT = {"fp8": 128}
ALIGN = 64
# config keys that hold a width proportional to the hidden size
INTERMEDIATE_KEYS = (
    "intermediate_size",
    "intermediate_size_mlp",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "ffn_hidden_size",
)
MLA_FIXED = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
MINI_RECORD = "kit_miniature.json"


def _up(x: float, a: int) -> int:
    return max(a, int(math.ceil(x / a)) * a)


def _keep_head_dim(c: dict[str, Any], new: dict[str, Any]) -> None:
    """Add head_dim to the shrunk sizes when the miniature's hidden / heads would change it (MHA configs that
    leave head_dim implicit)."""
    if c.get("head_dim") or "kv_lora_rank" in c:
        return
    hd = c["hidden_size"] // c["num_attention_heads"]
    if new.get("hidden_size", c["hidden_size"]) // new.get("num_attention_heads", c["num_attention_heads"]) != hd:
        new["head_dim"] = hd


@dataclass
class MiniTarget:
    config: dict[str, Any]  # the whole config.json, text config shrunk in place
    sizes: dict[str, tuple[Any, Any]]  # key -> (original, miniature), text-config keys
    notes: list[str] = field(default_factory=list)
    tp: int = 1
    align: int = ALIGN

    @property
    def text(self) -> dict[str, Any]:
        return self.config.get("text_config") or self.config


def _text(cfg: dict[str, Any]) -> dict[str, Any]:
    tc = cfg.get("text_config")
    return tc if isinstance(tc, dict) and tc.get("hidden_size") else cfg


def shrink_widths(
    tc: dict[str, Any],
    tp: int,
    hidden: int,
    align: int,
    shrink_head_dims: bool = False,
    force_hidden: int | None = None,
    multiple_of: int = 1,
) -> tuple[dict[str, Any], list[str]]:
    """{key: miniature value} for one (text) config's widths; notes on what was kept and why."""
    notes: list[str] = []
    H, nh = tc.get("hidden_size"), tc.get("num_attention_heads")
    if not H or not nh:
        raise KitInputError("config.json: no hidden_size / num_attention_heads to shrink")
    nkv = tc.get("num_key_value_heads") or nh
    mla = "kv_lora_rank" in tc
    hd = tc.get("head_dim") or (None if mla else H // nh)
    new: dict[str, Any] = {}
    per_head = hd or (tc.get("qk_nope_head_dim", 128) + tc.get("qk_rope_head_dim", 64))
    heads = Hm = None
    if force_hidden:
        # a draft: its hidden is the target's miniature; heads in proportion keep every equality between widths
        # (nh x head_dim == 2H stays so), so each tensor width still plays one role
        Hm = force_hidden
        if (nh * Hm) % H == 0 and (nh * Hm // H) % tp == 0:
            heads = nh * Hm // H
    elif H % nh == 0:
        # keep hidden / heads (the per-head width): hidden a multiple of that width x TP, of the alignment, and of
        # what the draft needs to keep its own per-head width (`multiple_of`)
        unit = H // nh
        m = math.lcm(unit * tp, align, multiple_of)
        h = _up(max(hidden, 2 * unit), m)
        if h // unit <= nh and h <= 8 * hidden:
            heads, Hm = h // unit, h
    if heads is None:
        heads = _up(max(2, (force_hidden or hidden) / per_head), tp)
        heads = min(heads, _up(nh, tp))
    if Hm is None:
        Hm = _up(hidden, align)
    new["num_attention_heads"] = heads
    group = nh // nkv if nkv and nh % nkv == 0 else 1
    kv = heads // group if heads % group == 0 and heads >= group else 1
    if not (kv % tp == 0 or tp % kv == 0):
        kv = tp
    if "num_key_value_heads" in tc or kv != heads:
        new["num_key_value_heads"] = kv
    new["hidden_size"] = Hm
    for k in INTERMEDIATE_KEYS:
        if isinstance(tc.get(k), int) and tc[k] > 0:
            new[k] = _up(tc[k] * Hm / H, align * tp)
    if isinstance(tc.get("q_lora_rank"), int):
        new["q_lora_rank"] = _up(tc["q_lora_rank"] * Hm / H, align)
    if mla:
        if shrink_head_dims:
            new["kv_lora_rank"] = _up(tc["kv_lora_rank"] * Hm / H, align)
            for k in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
                if isinstance(tc.get(k), int):
                    new[k] = max(16, tc[k] // 2)
            notes.append("MLA head dims shrunk (--shrink-head-dims): SGLang's MLA kernels may refuse them")
        else:
            notes.append(
                "MLA kv_lora_rank/qk_rope_head_dim/qk_nope_head_dim/v_head_dim kept "
                f"({', '.join(str(tc.get(k)) for k in MLA_FIXED)}): SGLang's MLA attention kernels take these sizes"
            )
    topk = tc.get("num_experts_per_tok") or tc.get("experts_per_token") or tc.get("moe_topk")
    for k in EXPERT_KEYS:
        if isinstance(tc.get(k), int) and tc[k] > 0:
            ng, tg = tc.get("n_group") or 1, tc.get("topk_group") or 1
            per_group = max(2, math.ceil((topk or 1) / tg))
            e = max(8, topk or 1, ng * per_group)
            new[k] = min(tc[k], _up(e, ng))
    return new, notes


def draft_unit(draft_cfg: HFConfig | None, target_hidden: int, tp: int) -> int:
    """What the target's miniature hidden size must be a multiple of so that the draft's heads shrink in
    proportion (its hidden is the target's; hidden / heads kept)."""
    if not draft_cfg:
        return 1
    from kit.sglang.draft_config import read_draft_config

    dc = read_draft_config(HFConfig.of(draft_cfg))
    H, nh = dc.hidden_size, dc.num_attention_heads
    if not H or not nh or H % nh or (dc.effective_target_hidden_size or H) != target_hidden or H != target_hidden:
        return 1
    return (H // nh) * tp


def miniature_target(
    config: HFConfig,
    tp: int = 1,
    hidden: int = 256,
    shrink_head_dims: bool = False,
    draft_config: HFConfig | None = None,
) -> MiniTarget:
    """The miniature of a target config.json (a new dict; the input is not modified). With the draft's config,
    the hidden size is also chosen so that the draft's heads shrink in proportion."""
    cfg = HFConfig.of(config).to_dict()
    tc = _text(cfg)
    notes: list[str] = []
    align = ALIGN
    q = cfg.get("quantization_config") or tc.get("quantization_config")
    method = (q or {}).get("quant_method") if isinstance(q, dict) else None
    if method:
        block = KEEP_QUANT.get(str(method).lower())
        if block:
            align = math.lcm(ALIGN, block)
            notes.append(f"quantization {method} kept (SGLang dummy-loads it); widths aligned to {align}")
        else:
            cfg.pop("quantization_config", None)
            tc.pop("quantization_config", None)
            notes.append(
                f"quantization {method} dropped: the kit does not know SGLang to dummy-load it on a miniature "
                "(the target runs unquantized in the rehearsal)"
            )
    new, more = shrink_widths(
        tc, tp, hidden, align, shrink_head_dims, multiple_of=draft_unit(draft_config, tc["hidden_size"], tp)
    )
    notes += more
    _keep_head_dim(tc, new)
    sizes = {k: (tc.get(k), v) for k, v in new.items() if tc.get(k) != v}
    tc.update(new)
    cfg["kit_miniature"] = {"of": "target", "tp": tp, "sizes": {k: list(v) for k, v in sizes.items()}}
    return MiniTarget(cfg, sizes, notes, tp, align)


# -- the draft --------------------------------------------------------------------------------------------
def _roles(c: dict[str, Any], k: int, Ht: int) -> dict[str, int]:
    """Dimension roles of a draft's tensors (what each width is made of)."""
    H, nh = c["hidden_size"], c["num_attention_heads"]
    nkv = c.get("num_key_value_heads") or nh
    mla = "kv_lora_rank" in c
    hd = c.get("head_dim") or (H // nh)
    out = {"H": H, "2H": 2 * H, "Ht": Ht, "k*Ht": k * Ht, "I": c.get("intermediate_size") or 0}
    if mla:
        nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        out.update(
            {
                "qr": c.get("q_lora_rank") or 0,
                "kvr": c["kv_lora_rank"],
                "kvr+rope": c["kv_lora_rank"] + rope,
                "nh*(nope+rope)": nh * (nope + rope),
                "nh*(nope+v)": nh * (nope + v),
                "nh*v": nh * v,
            }
        )
    else:
        out.update({"nh*hd": nh * hd, "nkv*hd": nkv * hd})
    return {r: v for r, v in out.items() if v}


def draft_dim_map(orig: dict[str, Any], mini: dict[str, Any], k: int, Ht: int, Ht_mini: int) -> dict[int, int]:
    """{original width: miniature width} over the draft's roles; raises when one width plays two roles that
    shrink differently (then no header-only mapping exists)."""
    a, b = _roles(orig, k, Ht), _roles(mini, k, Ht_mini)
    out: dict[int, int] = {}
    for role, v in a.items():
        if out.get(v, b[role]) != b[role]:
            raise KitInputError(
                f"draft config: width {v} is both {role} and another role that shrink differently; "
                "cannot map its tensors from the header alone"
            )
        out[v] = b[role]
    return out


def miniature_draft_config(draft_cfg: HFConfig, mini: MiniTarget) -> tuple[dict[str, Any], dict[int, int]]:
    """The draft's real config.json with only its widths edited, and the width map for its tensors."""
    from kit.sglang.draft_config import read_draft_config

    cfg = HFConfig.of(draft_cfg).to_dict()
    dc = read_draft_config(HFConfig.of(draft_cfg))
    c = cfg.get("transformer_layer_config") or cfg  # the dict holding the widths (speculators nests them)
    tH, tHm = mini.sizes.get("hidden_size", (mini.text["hidden_size"],) * 2)
    Ht = dc.effective_target_hidden_size or tH
    Ht_mini = tHm if Ht == tH else _up(Ht * tHm / tH, mini.align)
    force = Ht_mini if c["hidden_size"] == Ht else _up(c["hidden_size"] * tHm / tH, mini.align)
    new, _ = shrink_widths(c, mini.tp, force, mini.align, force_hidden=force)
    if "kv_lora_rank" in c:  # an MLA draft keeps the target's kernel dims as the target does
        for key in MLA_FIXED:
            if key in mini.sizes:
                new[key] = mini.sizes[key][1]
    orig_c = dict(c)
    _keep_head_dim(c, new)
    c.update({key: v for key, v in new.items() if key in c or key == "head_dim"})
    if "target_hidden_size" in c and c["target_hidden_size"]:
        c["target_hidden_size"] = Ht_mini
    if c is not cfg and "target_hidden_size" in cfg and cfg["target_hidden_size"]:
        cfg["target_hidden_size"] = Ht_mini
    mini_c = dict(c)
    if "head_dim" not in orig_c and "head_dim" in mini_c:
        orig_c["head_dim"] = orig_c["hidden_size"] // orig_c["num_attention_heads"]
    dims = draft_dim_map(orig_c, mini_c, dc.num_aux or 3, Ht, Ht_mini)
    return cfg, dims


def _random_bytes(dtype: str, shape: tuple[int, ...], seed: int):
    """Bytes of a random tensor of that dtype, without torch (numpy; bf16 as the top half of float32)."""
    import numpy as np

    n = math.prod(shape)
    rng = np.random.default_rng(seed)
    if dtype in ("BF16", "F16", "F32", "F64"):
        x = (rng.standard_normal(n, dtype=np.float32) * 0.02).astype(np.float32)
        if dtype == "BF16":
            return (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
        return x.astype({"F16": np.float16, "F32": np.float32, "F64": np.float64}[dtype]).tobytes()
    if dtype in ("F8_E4M3", "F8_E5M2", "U8", "I8"):
        return rng.integers(0, 0x30, n, dtype=np.uint8).tobytes()  # small positive normals in FP8
    width = {"I16": 2, "I32": 4, "I64": 8, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1}.get(dtype)
    if width is None:
        raise KitInputError(f"draft header: dtype {dtype} has no miniature writer")
    return bytes(n * width)


def miniature_tensors(ck, dims: dict[int, int], vocab: int | None, draft_vocab: int | None) -> list[tuple]:
    """[(name, dtype, mini shape, original shape)] in header order: every width mapped, vocab sizes kept."""
    keep = {v for v in (vocab, draft_vocab) if v}
    mini = lambda shape: tuple(s if s in keep else dims.get(s, s) for s in shape)
    return [(name, t.dtype, mini(t.shape), tuple(t.shape)) for name, t in ck.tensors.items()]


def write_miniature_draft(draft_dir: str | Path, out_dir: str | Path, mini: MiniTarget) -> dict[str, Any]:
    """Write the miniature draft (config.json + model.safetensors) into out_dir; returns what was done."""
    from kit.checkpoint.safetensors_io import WriteEntry, read_checkpoint, write_stream
    from kit.sglang.draft_config import read_draft_config

    src = Path(draft_dir)
    if not (src / "config.json").is_file():
        raise KitInputError(f"{src}: no config.json (a draft directory holds config.json and safetensors)")
    draft_cfg = json.loads((src / "config.json").read_text())
    ck = read_checkpoint(src)
    cfg, dims = miniature_draft_config(draft_cfg, mini)
    dc = read_draft_config(HFConfig.of(draft_cfg))
    vocab, dvocab = dc.vocab_size, dc.draft_vocab_or_target
    rows = miniature_tensors(ck, dims, vocab, dvocab)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def producer(name, dtype, shape, i):
        def gen():
            if name.split(".")[-1] == "t2d" and dtype == "BOOL":
                yield b"\x01" * (dvocab or 0) + b"\x00" * (math.prod(shape) - (dvocab or 0))
            else:
                yield _random_bytes(dtype, shape, i)

        return gen

    entries = [WriteEntry(n, d, s, producer(n, d, s, i)) for i, (n, d, s, _) in enumerate(rows)]
    write_stream(out / "model.safetensors", entries, {"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for extra in ("generation_config.json", "hf_quant_config.json"):  # its own quantization file: SGLang reads it
        if (src / extra).is_file():
            shutil.copyfile(src / extra, out / extra)
    record = {
        "of": str(src),
        "width_map": {str(k): v for k, v in sorted(dims.items())},
        "tensors": [{"name": n, "dtype": d, "shape": list(s), "original_shape": list(o)} for n, d, s, o in rows],
    }
    (out / MINI_RECORD).write_text(json.dumps(record, indent=1) + "\n")
    return record


# besides config.json: what SGLang reads from a target folder it dummy-loads (the processor of a multimodal target)
COPIED_FILES = tuple(
    "generation_config.json tokenizer.json tokenizer_config.json tokenizer.model tiktoken.model "
    "special_tokens_map.json processor_config.json preprocessor_config.json chat_template.json "
    "chat_template.jinja".split()
)
STAND_IN_MODULE = "kit_stand_in_processor"  # the module's name in the miniature folder (auto_map names it)


def missing_processor(target_config: HFConfig, target_dir: str | Path | None, version: str) -> frozenset[str]:
    """The target's architectures whose HF processor SGLang `version` loads at startup (kit.sglang.loader.
    processor_archs) when the target's folder holds no processor or tokenizer files to carry; empty: none missing
    (or that release's source is not at hand)."""
    from kit.sglang.loader import processor_archs

    archs = frozenset(target_config.get("architectures") or ()) & (processor_archs(version) or frozenset())
    if archs and target_dir is not None and any((Path(target_dir) / f).is_file() for f in PROCESSOR_FILES):
        return frozenset()
    return archs


def write_stand_in_processor(out_dir: str | Path, arch: str) -> str:
    """The kit's stand-in processor for `arch` in out_dir: the module, processor_config.json (auto_map to it, the
    vendor's media settings) and a tokenizer.json of a few words; returns a line saying what was written."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    spec = STAND_IN_PROCESSORS[arch]
    out = Path(out_dir)
    specials = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}
    words = [*specials.values(), spec["media_token"], "the", "draft", "target", "speaks"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([*specials.values(), spec["media_token"]])
    tok.save(str(out / "tokenizer.json"))
    shutil.copyfile(Path(__file__).with_name("stand_in_processor.py"), out / f"{STAND_IN_MODULE}.py")
    cfg = {
        "auto_map": {"AutoProcessor": f"{STAND_IN_MODULE}.KitStandInProcessor"},
        "special_tokens": specials,
        "media_proc_cfg": spec["media_proc_cfg"],
        "kit_stand_in": f"written by kit rehearse for {arch}: not the vendor's processor; input_ids only",
    }
    (out / "processor_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return (
        f"the target folder has no processor files, which SGLang loads for {arch} at startup: the miniature "
        f"carries the kit's stand-in processor ({len(words)}-word tokenizer, the vendor's media settings; "
        "requests go by input_ids, no media)"
    )


def write_miniature_target(
    target_config: HFConfig,
    out_dir: str | Path,
    mini: MiniTarget,
    source_dir: str | Path | None = None,
) -> Path:
    """config.json of the miniature target in out_dir (dummy-loaded: no weights), plus the target directory's own
    Python files (`auto_map` configuration code that --trust-remote-code loads), generation_config.json and its
    tokenizer/processor files (SGLang loads a multimodal target's processor at startup; kit.sglang.loader.processor_archs).
    A multimodal target whose folder lacks them gets the kit's stand-in instead (write_stand_in_processor)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(mini.config, indent=2) + "\n")
    if source_dir is not None and Path(source_dir).is_dir():
        for f in sorted(Path(source_dir).iterdir()):
            if f.is_file() and (f.suffix in (".py", ".tiktoken") or f.name in COPIED_FILES):
                shutil.copyfile(f, out / f.name)
    return out
