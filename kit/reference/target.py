"""Running an HF target the way the EAGLE-3 oracle and reference server need it (CPU, batch 1).

* `TargetCapture`: forward hooks recording the residual stream at capture points p (p = output
  of layer p-1, p = 0 the embeddings, p = L the final pre-norm state), or the final post-norm
  state SGLang hands the draft when aux capture is off;
* `target_forward`: one pass over new tokens appended to a DynamicCache, optionally with a tree
  attention mask (each tree node sees the prefix and its ancestors, at position prefix + depth);
* `cache_keep`: keep the accepted path's KV entries after a tree verify;
* `batch_greedy`: many greedy continuations at once (left-padded `generate`).

    with TargetCapture(model, [2, 15, 27]) as cap:
        model(input_ids=ids)
    feats = cap.features()          # [B, T, 3 * hidden]
"""

from __future__ import annotations

import torch

from kit.findings import KitInputError


def decoder_of(model):
    base = getattr(model, "model", None)
    if base is None or not hasattr(base, "layers"):
        base = model.get_decoder()
    return base


def default_points(L: int) -> list[int]:
    return [2, L // 2, L - 3]


class TargetCapture:
    """Forward hooks that record the residual stream at capture points during a target forward."""

    def __init__(self, model, points: list[int] | None):
        self.model, self.points = model, points
        self.store: dict = {}
        self.handles = []

    def __enter__(self):
        dec = decoder_of(self.model)
        L = len(dec.layers)

        def hook(key):
            def fn(_m, _i, out):
                self.store[key] = out[0] if isinstance(out, tuple) else out

            return fn

        if self.points is None:
            self.handles.append(dec.norm.register_forward_hook(hook("final")))
        else:
            for p in sorted(set(self.points)):
                if not 0 <= p <= L:
                    raise KitInputError(f"capture point {p} outside 0..{L} for a {L}-layer target")
                mod = dec.embed_tokens if p == 0 else dec.layers[p - 1]
                self.handles.append(mod.register_forward_hook(hook(p)))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []

    def features(self) -> torch.Tensor:
        """[B, T, W]: the captured states concatenated in capture order (k*Ht), or the final one (Ht)."""
        if self.points is None:
            return self.store["final"]
        return torch.cat([self.store[p] for p in self.points], dim=-1)


def call_target(model, input_ids, cache, **kw):
    """model(...) with a DynamicCache, under whichever keyword this transformers uses (cache= in 5.24+)."""
    import inspect

    sig = model.__dict__.get("_kit_cache_kw")
    if sig is None:
        sig = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        model.__dict__["_kit_cache_kw"] = sig
    return model(input_ids=input_ids, use_cache=True, **{sig: cache}, **kw)


def _cache_len(cache) -> int:
    return 0 if cache is None else cache.get_seq_length()


def _cache_keep(cache, prefix: int, keep: list[int]) -> None:
    """Keep the first `prefix` entries plus block entries `keep` (offsets after prefix)."""
    idx = torch.tensor(list(range(prefix)) + [prefix + k for k in keep], dtype=torch.long)
    layers = getattr(cache, "layers", None)
    dev = (layers[0].keys if layers else cache.key_cache[0]).device
    idx = idx.to(dev)
    if layers is not None:
        for lay in layers:
            lay.keys = lay.keys.index_select(2, idx)
            lay.values = lay.values.index_select(2, idx)
    else:  # older transformers DynamicCache
        for i in range(len(cache.key_cache)):
            cache.key_cache[i] = cache.key_cache[i].index_select(2, idx)
            cache.value_cache[i] = cache.value_cache[i].index_select(2, idx)


def target_forward(model, ids: list[int], cache, points, parents: list[int] | None = None):
    """Run the target over `ids` appended to `cache`. With `parents` (tree verify), token j
    attends to the prefix and its ancestors only, at position prefix + depth(j).
    Returns (argmax ids [T], features [T, W])."""
    P = _cache_len(cache)
    dev = next(model.parameters()).device
    x = torch.tensor([ids], dtype=torch.long, device=dev)
    kw = {}
    if parents is not None:
        T = len(ids)
        depth = [0] * T
        vis = torch.zeros(T, P + T, dtype=torch.bool, device="cpu")  # built on the host, then moved
        vis[:, :P] = True
        for j in range(T):
            a = j
            while a >= 0:
                vis[j, P + a] = True
                a = parents[a]
            depth[j] = 0 if parents[j] < 0 else depth[parents[j]] + 1
        dt = next(model.parameters()).dtype
        mask = torch.zeros(1, 1, T, P + T, dtype=dt, device="cpu").masked_fill(~vis, torch.finfo(dt).min).to(dev)
        kw = dict(attention_mask=mask, position_ids=torch.tensor([[P + d for d in depth]], device=dev))
    else:
        kw = dict(position_ids=torch.arange(P, P + len(ids), device=dev)[None])
    with TargetCapture(model, points) as cap:
        out = call_target(model, x, cache, **kw)
    return out.logits[0].argmax(-1), cap.features()[0], cache


@torch.inference_mode()
def batch_greedy(
    model, rows: list[list[int]], max_new_tokens: int, pad_id: int, eos_token_id: int | None, batch: int = 16
) -> list[list[int]]:
    """Greedy continuations of many prompts, batched with left padding (HF generate).

    Faster than `greedy_generate` per prompt; padded batches can differ from batch-1 decoding in
    rare near-ties, so use it for data and oracle references, not for equality checks.
    Each continuation stops after its first EOS."""
    out = []
    dev = next(model.parameters()).device
    for b0 in range(0, len(rows), batch):
        chunk = rows[b0 : b0 + batch]
        W = max(map(len, chunk))
        ids = torch.tensor([[pad_id] * (W - len(r)) + list(r) for r in chunk], device=dev)
        att = (torch.arange(W)[None] >= torch.tensor([W - len(r) for r in chunk])[:, None]).long().to(dev)
        g = model.generate(
            input_ids=ids,
            attention_mask=att,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=pad_id,
            eos_token_id=eos_token_id,
        )
        for row in g[:, W:].tolist():
            if eos_token_id is not None and eos_token_id in row:
                row = row[: row.index(eos_token_id) + 1]
            out.append(row)
    return out
