"""Speculative decoding as SGLang's EAGLE worker does it — one implementation, CPU, batch 1.

Used by the offline oracle (kit.reference.oracle) and by the CPU reference server (kit.serving.server).

* Drafting (`draft_tree`): SGLang 0.5.23 `eagle_worker_v2.draft_forward` +
  `spec_utils.select_top_k_tokens` + `eagle_utils.organize_draft_results`. Step 0 takes the
  top-k of the draft's last extend logits; each later step expands every lane, scores
  children by cumulative probability (parent score x softmax prob) and keeps the top-k lanes;
  finally the `speculative_num_draft_tokens - 1` best nodes by cumulative score form the tree. Draft
  attention in a tree step is per lane (prefix + that lane's own earlier steps), like SGLang's
  `generate_draft_decode_kv_indices`. topk 1 is a chain (kit.sglang.params resolves the parameters as SGLang does).
* Verification (`speculative_generate`): the target scores root + tree in one pass with a tree
  attention mask; greedy acceptance walks from the root to the child whose token equals the
  target's argmax, then emits the target's bonus token. The draft then extends over the accepted
  tokens with the target's hidden states at those positions (SGLang's draft-extend-after-decode).
* Aux wiring (`Wiring`): which target states the draft receives — the fused capture points
  (EAGLE3), the final post-norm state (aux capture off: `EAGLE` launch), shifted points, or a
  draft whose checkpoint keys were dropped at load.

    res = speculative_generate(target, draft, ids, 64, SpecParams(3, 1, 4), Wiring())
    res.tokens == greedy_generate(target, ids, 64).tokens   # always (greedy verification)

Target = an HF causal LM (Llama-family module layout; hooks and cache handling in kit.reference.target),
draft = kit.reference.draft.Eagle3Draft.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import torch

from kit.sglang.params import SpecParams

_LOCK = threading.Lock()  # hooks are attached to the shared target module: one request at a time


@dataclass
class Wiring:
    """What the serving stack feeds the draft. Defaults = correct EAGLE-3 wiring."""

    aux_capture: bool = True  # False: the final post-norm hidden state only (fc bypassed)
    layer_shift: int = 0  # added to every capture point (training vs serving skew)
    dropped_keys: tuple = ()  # checkpoint keys the serving loader silently drops
    capture_points: tuple | None = None  # physical points p (residual entering layer p); None: from draft config
    algorithm: str = "EAGLE3"  # EAGLE/NEXTN: aux off and target embed+head (SGLang worker path)
    notes: tuple = ()

    def describe(self) -> str:
        if self.algorithm.upper() != "EAGLE3":
            return f"{self.algorithm}: single final hidden state, target embed+head (fc bypassed)"
        if not self.aux_capture:
            return f"{self.algorithm}: single final hidden state (fc bypassed)"
        s = f"{self.algorithm}: capture points {list(self.capture_points) if self.capture_points else 'default'}"
        if self.layer_shift:
            s += f" shifted by {self.layer_shift:+d}"
        if self.dropped_keys:
            s += f", {len(self.dropped_keys)} keys dropped"
        return s


@dataclass
class SpecResult:
    tokens: list[int]  # new tokens (prefill token first); == greedy target decoding
    accept_lengths: list[int]  # tokens kept per verify step, bonus included
    verify_steps: int
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0
    prefill_time_s: float = 0.0
    accepted_drafts: list[int] = field(default_factory=list)  # draft tokens accepted per step (no bonus)

    @property
    def accept_length(self) -> float:
        """Server-log definition: accepted tokens (bonus incl.) per verify step."""
        return sum(self.accept_lengths) / self.verify_steps if self.verify_steps else 0.0

    @property
    def meta_accept_length(self) -> float:
        """`/generate` meta_info definition: completion_tokens / spec_verify_ct."""
        return len(self.tokens) / self.verify_steps if self.verify_steps else 0.0


from kit.reference.target import (  # noqa: E402,F401
    TargetCapture,
    _cache_keep,
    _cache_len,
    batch_greedy,
    call_target,
    default_points,  # TargetCapture/batch_greedy re-exported
    target_forward,
)


def capture_points_for(draft, target, wiring: Wiring) -> list[int] | None:
    """Physical capture points the draft receives under `wiring` (None = single final state)."""
    if not wiring.aux_capture or wiring.algorithm.upper() not in ("EAGLE3",):
        return None
    if wiring.capture_points is not None:
        pts = list(wiring.capture_points)
    else:
        L = target.config.get_text_config().num_hidden_layers
        ids = draft.spec.aux_layer_ids
        # SGLang "+1" Llama rule: explicit ids x -> p = x + 1; default [2, L//2, L-3] as-is
        pts = [x + 1 for x in ids] if ids else default_points(L)
    return [p + wiring.layer_shift for p in pts]


# -- draft side ----------------------------------------------------------------------------
class DraftState:
    """The draft's KV cache over verified positions (SGLang's draft req_to_token entries)."""

    def __init__(self, draft):
        self.draft = draft
        self.kv = None  # per-layer (k, v) [1, nkv, S, hd]
        self.logits = None  # [Vd] at the last extended position
        self.aux = None  # [H] next-step hidden at the last extended position
        self.pos = -1  # position of the last extended token

    def extend(self, tokens: list[int], feats: torch.Tensor, start: int):
        """Draft extend: tokens[i] (the token after position start+i) with target feats[i]."""
        ids = torch.tensor([tokens], dtype=torch.long, device=feats.device)
        pos = torch.arange(start, start + len(tokens), device=feats.device)[None]
        logits, aux, new = self.draft(ids, feats[None], pos, past_kv=self.kv)
        self.kv = (
            new
            if self.kv is None
            else [(torch.cat([pk, k], 2), torch.cat([pv, v], 2)) for (pk, pv), (k, v) in zip(self.kv, new)]
        )
        self.logits, self.aux, self.pos = logits[0, -1], aux[0, -1], start + len(tokens) - 1


def _topk(x: torch.Tensor, k: int):
    # SGLang's fast_topk: max for k=1, torch.topk otherwise
    return x.max(-1, keepdim=True) if k == 1 else torch.topk(x, k, dim=-1)


@torch.inference_mode()
def draft_trees(
    draft, logits: torch.Tensor, aux: torch.Tensor, kv, prefix_len: list[int], pos: list[int], p: SpecParams
):
    """SGLang's draft tree for R roots at once (the oracle batches every position of a sequence).

    logits [R, Vd] / aux [R, H]: the draft's extend output at the last verified position of each
    root; kv: the draft's per-layer (k, v) [1, nkv, S, hd]; root r sees its first prefix_len[r]
    entries; pos[r]: position of that last extend output. Returns per root (tokens, parents,
    scores) with node order = SGLang's sorted candidate index (parents precede children,
    parent -1 = the root token).
    """
    k, R, dev = p.speculative_eagle_topk, logits.shape[0], logits.device
    topk_p, topk_i = _topk(torch.softmax(logits.float(), -1), k)  # [R, k]
    topk_i = draft.to_target_ids(topk_i)
    cand_tok, cand_score, cand_parent = [topk_i], [topk_p], [torch.full((R, k), -1, device=dev)]
    lane_cand = torch.arange(k, device=dev).expand(R, k)
    scores = topk_p
    hidden = aux.repeat_interleave(k, 0)  # lanes share the root state
    input_ids = topk_i.reshape(-1)
    S = kv[0][0].shape[2]
    prefix_vis = torch.arange(S, device=dev)[None, :] < torch.tensor(prefix_len, device=dev)[:, None]  # [R, S]
    prefix_vis = prefix_vis.repeat_interleave(k, 0)[:, None, None, :]  # [R*k, 1, 1, S]
    base = torch.tensor(pos, device=dev).repeat_interleave(k)[:, None]
    lane_kv = None
    offset = k
    for i in range(1, p.speculative_num_steps):
        past = []
        for li, (pk, pv) in enumerate(kv):
            ek, ev = pk.expand(R * k, -1, -1, -1), pv.expand(R * k, -1, -1, -1)
            if lane_kv is not None:  # per-lane history, as generate_draft_decode_kv_indices lays it out
                ek, ev = torch.cat([ek, lane_kv[li][0]], 2), torch.cat([ev, lane_kv[li][1]], 2)
            past.append((ek, ev))
        mask = torch.cat([prefix_vis, torch.ones(R * k, 1, 1, i, dtype=torch.bool, device=dev)], -1)
        lg, hid, new = draft(input_ids[:, None], hidden[:, None], base + i, past_kv=past, mask=mask)
        lane_kv = (
            new
            if lane_kv is None
            else [(torch.cat([a, b], 2), torch.cat([c, d], 2)) for (a, c), (b, d) in zip(lane_kv, new)]
        )
        tp, ti = _topk(torch.softmax(lg[:, 0].float(), -1), k)  # [R*k, k]
        ti = draft.to_target_ids(ti).reshape(R, k * k)
        expand = (scores[:, :, None] * tp.reshape(R, k, k)).reshape(R, k * k)
        cand_tok.append(ti)
        cand_score.append(expand)
        cand_parent.append(lane_cand.repeat_interleave(k, 1))
        scores, sel = _topk(expand, k)  # [R, k]
        input_ids = torch.gather(ti, 1, sel).reshape(-1)
        rows = (torch.arange(R, device=dev)[:, None] * k + sel // k).reshape(-1)
        hidden = hid[:, 0][rows]
        lane_cand = sel + offset
        offset += k * k
    tok, sc, par = torch.cat(cand_tok, 1), torch.cat(cand_score, 1), torch.cat(cand_parent, 1)
    chosen = torch.sort(torch.topk(sc, p.speculative_num_draft_tokens - 1, dim=-1).indices, dim=-1).values
    out = []
    for r in range(R):
        ch = chosen[r].tolist()
        where = {c: j for j, c in enumerate(ch)}
        # a node whose parent was not chosen (score ties) is unreachable, as in SGLang's tree build
        parents = [-1 if int(par[r, c]) < 0 else where.get(int(par[r, c]), -2) for c in ch]
        out.append(([int(tok[r, c]) for c in ch], parents, [float(sc[r, c]) for c in ch]))
    return out


def draft_tree(draft, logits: torch.Tensor, aux: torch.Tensor, prefix_kv, pos: int, p: SpecParams):
    """One root: (tokens, parents, scores) of SGLang's tree from logits [Vd] / aux [H] at `pos`."""
    S = prefix_kv[0][0].shape[2]
    return draft_trees(draft, logits[None], aux[None], prefix_kv, [S], [pos], p)[0]


def greedy_accept(tokens: list[int], parents: list[int], predict: list[int]) -> list[int]:
    """Greedy tree verification. predict[0] is the target's argmax after the root, predict[1+j]
    after node j. Returns the accepted node indices along the path (root excluded)."""
    path, cur = [], -1
    while True:
        want = predict[0 if cur < 0 else 1 + cur]
        nxt = next((j for j, (t, pa) in enumerate(zip(tokens, parents)) if pa == cur and t == want), None)
        if nxt is None:
            return path
        path.append(nxt)
        cur = nxt


def prepare_draft(draft, target, wiring: Wiring):
    """The draft as the serving stack would run it under `wiring` (a cached faulted copy if needed)."""
    alg = wiring.algorithm.upper()
    if not wiring.dropped_keys and alg == "EAGLE3":
        return draft
    copies = draft.__dict__.setdefault("_wired_copies", {})
    key = (tuple(wiring.dropped_keys), alg)
    if key not in copies:
        from kit.reference.draft_io import reset_params

        d = _deep_except_embed(draft)
        if wiring.dropped_keys:
            reset_params(d, wiring.dropped_keys)
        if alg != "EAGLE3":
            d.attach_target(target, alg)
        copies[key] = d
    return copies[key]


def _deep_except_embed(draft):
    """Deep copy that shares the (large, target-owned) embedding and head tensors."""
    import copy

    memo = {id(draft.embed_tokens.weight): draft.embed_tokens.weight}
    if draft.lm_head is not None:
        memo[id(draft.lm_head.weight)] = draft.lm_head.weight
    if "_wired_copies" in draft.__dict__:
        memo[id(draft.__dict__["_wired_copies"])] = {}
    return copy.deepcopy(draft, memo)


@torch.inference_mode()
def speculative_generate(
    target,
    draft,
    input_ids: list[int],
    max_new_tokens: int,
    params: SpecParams,
    wiring: Wiring = Wiring(),
    eos_token_id: int | None = None,
) -> SpecResult:
    """Greedy speculative decoding of one request, as SGLang runs EAGLE-3 (batch 1).

    Returns the new tokens (prefill token first, truncated at max_new_tokens / after EOS) and
    per verify step the number of tokens kept (accepted drafts + bonus).
    """
    from transformers import DynamicCache

    p = params.resolved()
    d = prepare_draft(draft, target, wiring)
    points = capture_points_for(d, target, wiring)
    eos = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))
    with _LOCK:
        t0 = time.perf_counter()
        cache = DynamicCache()
        pred, feats, cache = target_forward(target, list(input_ids), cache, points)
        root = int(pred[-1])
        out = [root]
        st = DraftState(d)
        st.extend(list(input_ids[1:]) + [root], feats, 0)
        res = SpecResult(tokens=out, accept_lengths=[], verify_steps=0)
        res.prefill_time_s = time.perf_counter() - t0
        while len(out) < max_new_tokens and root not in eos:
            t1 = time.perf_counter()
            toks, pars, _ = draft_tree(d, st.logits, st.aux, st.kv, st.pos, p)
            t2 = time.perf_counter()
            P = _cache_len(cache)
            chain = all(pa == j - 1 for j, pa in enumerate(pars))
            pred, feats, cache = target_forward(
                target, [root] + toks, cache, points, None if chain else [-1] + [pa + 1 for pa in pars]
            )
            pred = pred.tolist()
            path = greedy_accept(toks, pars, pred)
            new = [toks[j] for j in path]
            bonus = pred[0 if not path else 1 + path[-1]]
            keep = [0] + [1 + j for j in path]
            _cache_keep(cache, P, keep)
            emitted = new + [bonus]
            # stop at EOS / max_new_tokens exactly like the scheduler's finish check
            kept = []
            for t in emitted:
                if len(out) + len(kept) >= max_new_tokens:
                    break
                kept.append(t)
                if t in eos:
                    break
            st.extend(emitted, feats[keep], st.pos + 1)
            root = kept[-1] if kept else bonus
            out.extend(kept)
            res.verify_steps += 1
            res.accept_lengths.append(len(kept))
            res.accepted_drafts.append(len(new))
            t3 = time.perf_counter()
            res.draft_time_s += (t2 - t1) + 0.0
            res.verify_time_s += t3 - t2
            if kept and kept[-1] in eos:
                break
    return res


@torch.inference_mode()
def greedy_generate(target, input_ids: list[int], max_new_tokens: int, eos_token_id: int | None = None) -> SpecResult:
    """Plain greedy decoding with a KV cache (the no-speculation baseline).

    Returns a SpecResult with verify_steps 0 and empty accept_lengths; verify_time_s is the
    decode time after prefill."""
    from transformers import DynamicCache

    eos = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))
    with _LOCK:
        t0 = time.perf_counter()
        cache = DynamicCache()
        dev = next(target.parameters()).device
        o = call_target(target, torch.tensor([list(input_ids)], device=dev), cache)
        tok = int(o.logits[0, -1].argmax())
        out = [tok]
        t1 = time.perf_counter()
        while len(out) < max_new_tokens and tok not in eos:
            o = call_target(target, torch.tensor([[tok]], device=dev), cache)
            tok = int(o.logits[0, -1].argmax())
            out.append(tok)
        t2 = time.perf_counter()
    return SpecResult(tokens=out, accept_lengths=[], verify_steps=0, verify_time_s=t2 - t1, prefill_time_s=t1 - t0)
