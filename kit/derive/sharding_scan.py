"""Where each SGLang release divides a size by the launch's parallel flags (`kit/sglang/sharding_rules.json`).

One regex per fact (`FACTS`) over the release's wheel text, its first match recorded as "srt/file.py:line" (a
release without it lacks that division); kit/tests/sglang/test_sharding.py re-derives `RELEASES` and compares.

    python -m kit.derive.sharding_scan [VERSION ...]    # print where each release divides each size
    python -m kit.derive.sharding_scan --write          # rewrite kit/sglang/sharding_rules.json (RELEASES)
"""

from __future__ import annotations

import json
import re
import sys

from kit.sglang.sharding import TABLE_PATH
from kit.sglang.source import source_text
from kit.sglang.versions import DEFAULT_RELEASE, sort_versions

RELEASES = ("0.4.4", "0.4.6.post5", "0.4.10", "0.5.1", "0.5.8", "0.5.17", DEFAULT_RELEASE)  # the recorded ones
FILES = {
    "llama": "models/llama.py", "dsv2": "models/deepseek_v2.py", "linear": "layers/linear.py",
    "vocab": "layers/vocab_parallel_embedding.py", "moe": "layers/moe/fused_moe_triton/layer.py",
    "epmoe": "layers/moe/ep_moe/layer.py", "ps": "distributed/parallel_state.py", "rc": "runtime_context.py",
    "args": "server_args.py", "over": "arg_groups/overrides.py", "par": "arg_groups/parallel_hook.py",
    "dpa": "layers/dp_attention.py", "fp8": "layers/quantization/fp8.py", "marlin": "layers/quantization/marlin_utils.py",
    "ct": "layers/quantization/compressed_tensors/schemes/compressed_tensors_wNa16.py",
    "ctmoe": "layers/quantization/compressed_tensors/compressed_tensors_moe.py",
    "ctmoe2": "layers/quantization/compressed_tensors/schemes/compressed_tensors_wNa16_moe.py",
}  # fmt: skip
# fact, files (searched in order), regex whose first match is the fact's line; a release without it lacks the division
_FACT_LINES = r"""
heads llama assert self\.total_num_heads % tp_size == 0
kv_heads llama assert self\.total_num_kv_heads % tp_size == 0
kv_replicas llama assert tp_size % self\.total_num_kv_heads == 0
mla_heads_attn_tp dsv2 assert num_heads % attn_tp_size == 0
mla_heads_tp dsv2 assert num_heads % tp_size == 0
qkv_heads linear self\.num_heads = divide\(self\.total_num_heads, tp_size\)
qkv_kv linear self\.num_kv_heads = divide\(self\.total_num_kv_heads, (kv_)?tp_size\)
qkv_kv_replicas linear self\.num_kv_head_replicas = divide\((kv_)?tp_size, self\.total_num_kv_heads\)
column linear divide\(output_size, tp_size\) for output_size in self\.output_sizes
vocab vocab self\.num_embeddings_per_partition = divide\(
vocab_pad_64 vocab ^DEFAULT_VOCAB_PADDING_SIZE = 64$
vocab_pads_to_tp vocab ^\s*if pad_vocab_size\(self\.org_vocab_size, padding_size\) % self\.tp_size != 0:
experts moe|epmoe assert \(?(self\._num_global_routed|num_experts|self\.num_experts)[^%]*% \S+ == 0
moe_inter moe assert intermediate_size % self\.moe_tp_size == 0
moe_inter_floor moe self\.intermediate_size_per_partition = intermediate_size // self\.tp_size
moe_tp ps|rc moe_tp_size"?:?\s*=?\s*(tensor_model_parallel_size|tp_size) // moe_ep_size
ep_is_tp args|over self\.ep_size = self\.tp_size|return \{"ep_size": view\.tp_size\}
attn_tp dpa|rc attn_tp_size = tp_size // |def derive_attn_tp_size
dp_is_tp args if self\.enable_dp_attention:\n\s+self\.dp_size = self\.tp_size
tp_dp args|par assert self\.tp_size % self\.dp_size == 0|assert cfg\.tp_size % \(cfg\.attn_dp_size
fp8_moe_block fp8 if intermediate_size(_per_partition)? % block_n != 0:
fp8_column fp8 if output_partition_size % block_n != 0:
marlin_group marlin input_size_per_partition % group_size != 0
ct_group ct assert input_size_per_partition % group_size == 0
ct_moe_groups ctmoe|ctmoe2 num_groups_w2 = w2_scales_size // self\.group_size
"""
FACTS = {n: (files.split("|"), rx) for n, files, rx in (line.split(" ", 2) for line in _FACT_LINES.split("\n")[1:-1])}


def derive(version: str, download: bool = True) -> dict[str, str]:
    """{fact: "srt/file.py:line"} of every FACTS regex found in that release's source."""
    out = {}
    for fact, (keys, rx) in FACTS.items():
        for f in (f"srt/{FILES[k]}" for k in keys):
            text = source_text(version, f, download) or ""
            if m := re.search(rx, text, re.M):
                out[fact] = f"{f}:{text.count(chr(10), 0, m.start()) + 1}"
                break
    return out


def compare(version: str) -> str | None:
    """None when each fact is in the same file as in the newest recorded release not after `version` (its line may
    move); else the facts that moved, appeared or went."""
    from kit.sglang.sharding import table
    from kit.sglang.versions import pick_recorded

    rows = table()
    ref = pick_recorded(version, rows).checked
    got = {f: at.split(":")[0] for f, at in derive(version).items()}
    had = {f: at.split(":")[0] for f, at in rows[ref].items()}
    moved = [
        f"{f}: {had.get(f, 'absent')} -> {got.get(f, 'absent')}"
        for f in sorted({*got, *had})
        if got.get(f) != had.get(f)
    ]
    return f"against {ref}: {'; '.join(moved)}" if moved else None


if __name__ == "__main__":
    if "--write" in sys.argv:  # one line per release
        rows = [f'  "{v}": {json.dumps(derive(v))}' for v in sort_versions(RELEASES)]
        about = "`python -m kit.derive.sharding_scan --write` from real wheels; kit/tests/sglang/test_sharding.py"
        TABLE_PATH.write_text(f'{{\n "_doc": "{about}",\n "versions": {{\n' + ",\n".join(rows) + "\n }\n}\n")
    for v in [a for a in sys.argv[1:] if a != "--write"] or RELEASES:
        print(v, json.dumps(derive(v)))
