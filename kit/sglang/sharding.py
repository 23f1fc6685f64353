"""Tensor/expert/data-parallel sharding, statically: every size SGLang divides by the launch's parallel flags.

SGLang splits attention and KV heads, MLP/MoE intermediate sizes, experts and the vocabulary over the GPUs while it
builds the target and the draft, and asserts (or raises) where a size does not divide: a draft with 20 heads under
`--tp-size 8` never starts (`assert self.total_num_heads % tp_size == 0`, srt/models/llama.py). Each division's
place comes from each release's source (`kit.derive.sharding_scan`: one regex per fact over the wheel's text, as
file:line in kit/sglang/sharding_rules.json); the launch's sizes as its ServerArgs resolves them (`Parallel`);
`shard_findings` judges target and draft (`DraftConfig`): `launch.shard`, static (not yet rehearsed on several GPUs).

    shard_findings(target_cfg, draft_cfg, ["--tp-size", "8"], "0.5.17")
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from kit.findings import Code, Finding
from kit.hf import EXPERT_KEYS, HFConfig
from kit.sglang.versions import default_release, pick_recorded

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "launch/process/logs: notebook 04"
SHARD = Code(
    "launch.shard",
    SECTION,
    "error / info",
    (
        "a size of the target or draft that SGLang splits under the launch's `--tp-size`/`--dp-size` "
        "(`--enable-dp-attention`)/`--ep-size` does not divide: attention or KV heads (the draft's `LlamaAttention` "
        "asserts `total_num_heads % tp_size == 0`), MLA heads over attention TP, MLP/MoE intermediate sizes, routed "
        "experts over EP, the padded vocabulary, FP8 blocks or INT4 groups of a shard; SGLang asserts or raises while "
        "it builds the model (per release, file:line from its source, `kit.sglang.sharding`). Static, not yet "
        "rehearsed on multiple GPUs; info: the draft's KV heads replicated over more GPUs than it has"
    ),
    (
        "a `--tp-size` (or `--ep-size`, `--dp-size` with `--enable-dp-attention`, `--moe-dense-tp-size 1`) "
        "the finding lists, or a draft whose heads divide it"
    ),
)

TABLE_PATH = Path(__file__).with_name("sharding_rules.json")
STATIC = "static check (not yet rehearsed on multiple GPUs)"
FLOORS = {"moe_inter_floor", "ct_moe_groups"}  # no check: the shard is sized by floor division
RAISES = {"fp8_moe_block", "fp8_column", "marlin_group"}  # ValueError rather than an assert
POWERS = (1, 2, 4, 8, 16, 32, 64)


@lru_cache(maxsize=1)
def table() -> dict[str, dict[str, str]]:
    return json.loads(TABLE_PATH.read_text())["versions"]


@dataclass(frozen=True)
class Parallel:
    """The launch's parallel flags under SGLang's current names (ServerArgs fields, whatever dest the release's
    parser uses: `kit.sglang.flags.table_for`), and the sizes a release derives."""

    tp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    enable_dp_attention: bool = False
    enable_ep_moe: bool = False
    enable_deepep_moe: bool = False
    moe_a2a_backend: str | None = None
    moe_dense_tp_size: int | None = None

    @classmethod
    def of(cls, flags: list[str], version: str | None = None) -> Parallel:
        from kit.sglang.flags import resolve_flags

        v = resolve_flags(flags, version).values
        return cls(**{f.name: v[f.name] for f in fields(cls) if v.get(f.name) is not None})

    def sizes(self, facts: dict[str, str]) -> dict[str, int]:
        """EP (--tp-size under an all-to-all backend or EP MoE: `ep_is_tp`; --ep-size only once `moe_tp` exists),
        attention TP (tp / dp under DP attention, 1 where DP attention sets dp = tp), MoE TP (tp / ep)."""
        tp, a2a = self.tp_size, self.moe_a2a_backend not in (None, "none")
        ep = tp if self.enable_ep_moe or self.enable_deepep_moe or a2a else self.ep_size if "moe_tp" in facts else 1
        attn = (1 if "dp_is_tp" in facts else tp // max(self.dp_size, 1)) if self.enable_dp_attention else tp
        dense = 1 if self.moe_dense_tp_size == 1 else tp
        return {"tp_size": tp, "attn_tp_size": max(attn, 1), "moe_ep_size": ep, "moe_tp_size": max(tp // ep, 1),
                "dense_tp_size": dense}  # fmt: skip


class Split(NamedTuple):
    """`size` split over `by` GPUs (and each shard a multiple of `multiple`); `kv`: fewer KV heads than GPUs, which
    SGLang replicates, so the GPU count must be a multiple of the heads."""

    side: str
    what: str
    size: int
    by_name: str
    by: int
    fact: str
    multiple: int = 1
    kv: bool = False
    hint: str = ""

    def fails(self, n: int | None = None) -> bool:
        n = self.by if n is None else n
        if self.kv:
            return (n % self.size if n > self.size else self.size % n) != 0
        if self.multiple > 1:  # a shard that does not divide at all is judged by the plain split
            return n > 1 and self.size % n == 0 and (self.size // n) % self.multiple != 0
        return n > 1 and self.size % n != 0


def _int4_group(q: dict) -> tuple[int | None, list[str]]:
    """(group size of 4-bit weights, compressed-tensors `ignore` list) of a quantization_config."""
    if q.get("quant_method") in ("gptq", "awq") and q.get("bits") == 4 and (q.get("group_size") or -1) > 0:
        return q["group_size"], []
    for grp in (q.get("config_groups") or {}).values():
        w = grp.get("weights") or {}
        if w.get("num_bits") == 4 and w.get("strategy") == "group" and w.get("group_size"):
            return w["group_size"], list(q.get("ignore") or [])
    return None, []


def _ignored(ignore: list[str], module: str) -> bool:
    """compressed-tensors `ignore`: `re:` entries match a representative module name, the others its tail."""
    return any(re.match(i[3:], module) if i.startswith("re:") else i.endswith(module.split(".", 3)[-1]) for i in ignore)


def _splits(side: str, c: HFConfig, d, s: dict[str, int], facts: dict[str, str]) -> list[Split]:
    """Every division SGLang makes of one model (`d`: the draft's DraftConfig; None for the target)."""
    tp, ep, mtp, t = s["tp_size"], s["moe_ep_size"], s["moe_tp_size"], c.text
    nh = d.num_attention_heads if d else t.get("num_attention_heads")
    nkv = d.num_key_value_heads if d else (t.get("num_key_value_heads") or nh)
    mla = (d.kv_lora_rank if d else t.get("kv_lora_rank")) is not None
    inter = d.intermediate_size if d else t.get("intermediate_size")
    experts = None if d else next((t[k] for k in EXPERT_KEYS if t.get(k)), None)
    moe = t.get("moe_intermediate_size") or inter if experts else None
    # the draft's LlamaAttention (llama.py) divides heads by the full TP; MLA and the target's QKV by attention TP
    by = tp if (d and not mla) or (mla and "mla_heads_attn_tp" not in facts) else s["attn_tp_size"]
    att = "TP" if by == tp else "attention TP"
    heads = ("mla_heads_attn_tp" if "mla_heads_attn_tp" in facts else "mla_heads_tp") if mla else "heads"
    dense = inter if d or not experts or t.get("first_k_dense_replace") else None
    dtp = tp if d else s["dense_tp_size"]
    ep_flag = f"--ep-size {tp}" if "moe_tp" in facts else "--enable-ep-moe"
    ep_hint = f"; or {ep_flag}: whole experts per GPU" if experts and experts % tp == 0 else ""
    dense_hint = "; or --moe-dense-tp-size 1: dense layers unsplit" if experts and "moe_tp" in facts else ""
    q = {} if d else dict(c.get("quantization_config") or t.get("quantization_config") or {})
    block = (q.get("weight_block_size") or [0])[0] if q.get("quant_method") == "fp8" else 0
    group, ignore = _int4_group(q)
    ct = "ct_group" if q.get("quant_method") == "compressed-tensors" else "marlin_group"
    rows = [
        nh and ("attention heads", nh, att, by, heads if d or mla else "qkv_heads"),
        nkv and not mla and nkv >= by and ("KV heads", nkv, att, by, "kv_heads" if d else "qkv_kv"),
        nkv and not mla and nkv < by and ("KV heads", nkv, att, by, "kv_replicas" if d else "qkv_kv_replicas", 1, 1),
        dense and ("MLP intermediate_size", dense, "TP", dtp, "column", 1, 0, dense_hint),
        moe and ("routed experts", experts, "EP", ep, "experts"),
        moe and ("MoE intermediate size", moe, "MoE TP", mtp, "moe_inter" if "moe_inter" in facts else "moe_inter_floor", 1, 0, ep_hint),
        moe and block and ("MoE intermediate size (FP8 block)", moe, "MoE TP", mtp, "fp8_moe_block", block, 0, ep_hint),
        dense and block and ("MLP intermediate_size (FP8 block)", dense, "TP", dtp, "fp8_column", block, 0, dense_hint),
        moe and group and not _ignored(ignore, "model.layers.1.mlp.experts.0.down_proj")
        and (f"MoE down_proj input (INT4 group {group})", moe, "MoE TP", mtp, "ct_moe_groups", group, 0, ep_hint),
        dense and group and not _ignored(ignore, "model.layers.0.mlp.down_proj")
        and (f"down_proj input (INT4 group {group})", dense, "TP", dtp, ct if ct in facts else "marlin_group", group, 0, dense_hint),
    ]  # fmt: skip
    if "vocab_pads_to_tp" not in facts:  # VocabParallelEmbedding / ParallelLMHead: 64-row padding, then divide()
        vocabs = {d.vocab_size, d.draft_vocab_or_target} - {None} if d else {t.get("vocab_size")} - {None}
        rows += [(f"vocabulary {v} padded to {-(-v // 64) * 64}", -(-v // 64) * 64, "TP", tp, "vocab") for v in vocabs]
    return [Split(side, *r) for r in rows if r]


def _finding(x: Split, p: Parallel, s: dict[str, int], requested: str, facts: dict[str, str]) -> Finding:
    if x.kv:
        what = f"{x.side} {x.by_name} {x.by} is neither a divisor nor a multiple of its {x.size} KV heads"
    elif x.multiple > 1:
        what = f"{x.side} {x.what} = {x.size}: its {x.by_name} {x.by} shard {x.size // x.by} is not a multiple of {x.multiple}"
    else:
        what = f"{x.side} {x.what} = {x.size} is not divisible by {x.by_name} {x.by}"
    how = "sizes the shard by floor division, so the checkpoint's tensors do not fit it" if x.fact in FLOORS else (
        ("raises ValueError" if x.fact in RAISES else "asserts") + " at startup and never serves")  # fmt: skip
    ev = {"side": x.side, "size": x.size, "divided_by": {x.by_name: x.by}, "shard_multiple_of": x.multiple}
    ev.update(parallel={**s, "dp_size": p.dp_size}, sglang=requested, source=facts[x.fact], static=STATIC)
    return SHARD(
        f"{STATIC}: {what}; SGLang {requested} {how} ({facts[x.fact]})",
        evidence=ev,
        fix=f"a {x.by_name} size among {[n for n in POWERS if not x.fails(n)]} (--tp-size; --dp-size with "
        f"--enable-dp-attention; --ep-size){x.hint}",
    )


def shard_findings(
    target: HFConfig | None, draft: HFConfig | None, flags: list[str], version: str | None = None
) -> list[Finding]:
    """`launch.shard`: each size release `version` shards under these flags that does not divide (error), and the
    draft's KV heads replicated over more GPUs than it has (info)."""
    from kit.sglang.draft_config import read_draft_config

    facts = table()[pick_recorded(version, table()).checked]
    p = Parallel.of(flags, version)
    s = p.sizes(facts)
    if p.tp_size <= 1:
        return []
    d = read_draft_config(draft) if draft else None
    splits = (_splits("target", HFConfig.of(target), None, s, facts) if target else []) + (
        _splits("draft", HFConfig.of(draft), d, s, facts) if d else []
    )
    if p.enable_dp_attention and "dp_is_tp" not in facts:  # (0.4.4 sets dp = tp itself)
        splits.append(Split("launch", "--tp-size", p.tp_size, "--dp-size", p.dp_size, "tp_dp"))
    requested = version or default_release()
    out = [_finding(x, p, s, requested, facts) for x in splits if x.fact in facts and x.fails()]
    for kv in (x for x in splits if x.side == "draft" and x.kv and not x.fails()):
        title = f"{STATIC}: the draft's {kv.size} KV heads are replicated {kv.by // kv.size}x over TP {kv.by}"
        ev = {"num_key_value_heads": kv.size, "tp_size": kv.by, "source": facts.get(kv.fact)}
        out.append(SHARD(title + " (each GPU holds its heads' whole KV cache)", evidence=ev, severity="info", fix=""))
    return out
