"""Speculative decoding as SGLang's EAGLE worker does it: one implementation, batched, any device, used by the
CPU reference server (kit.refserver.decoder), the oracle and the benchmarks.

* Drafting (`draft_trees`): SGLang's `eagle_worker_v2.draft_forward` + `spec_utils.select_top_k_tokens` +
  `eagle_utils.organize_draft_results`: top-k lanes scored by cumulative probability, then the
  `speculative_num_draft_tokens - 1` best nodes form the tree; attention per lane (prefix + the lane's own
  steps), as `generate_draft_decode_kv_indices` lays it out. topk 1 is a chain.
* Verification (`BatchDecoder.step`): one ragged target forward (kit.reference.target.RaggedTarget) over
  every sequence's root + tree; greedy acceptance (`walk_tree`), the bonus token, then the draft extends over
  the accepted tokens (draft-extend-after-decode). Per-sequence caches: sequences join and leave between
  steps (continuous batching).
* Aux wiring (`Wiring`): which target states the draft receives (fused capture points, the final post-norm
  state of an `EAGLE` launch, shifted points) and checkpoint keys dropped at load.

    res = speculative_generate(target, draft, ids, 64, SpecParams(3, 1, 4), Wiring())
    res.tokens == reference_greedy(target, ids, 64)      # greedy verification (kit.reference.target)

Target = an HF causal LM with the Llama module layout, draft = kit.reference.draft.Eagle3Draft.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from kit.reference.draft_io import reset_params
from kit.reference.target import Piece, RaggedTarget, default_points, eos_ids
from kit.sglang.params import SpecParams


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
        s += f" shifted by {self.layer_shift:+d}" if self.layer_shift else ""
        return s + (f", {len(self.dropped_keys)} keys dropped" if self.dropped_keys else "")


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


def _cat_kv(a, b):
    """Per-layer (k, v) caches `a` then `b` along the sequence (either None: the other)."""
    if a is None or b is None:
        return b if a is None else a
    return [(torch.cat([ak, bk], 2), torch.cat([av, bv], 2)) for (ak, av), (bk, bv) in zip(a, b)]


def _topk(x: torch.Tensor, k: int):
    # SGLang's fast_topk: max for k=1, torch.topk otherwise
    return x.max(-1, keepdim=True) if k == 1 else torch.topk(x, k, dim=-1)


@torch.inference_mode()
def draft_trees(
    draft, logits: torch.Tensor, aux: torch.Tensor, kv, prefix_len: list[int], pos: list[int], p: SpecParams
):
    """SGLang's draft tree for R roots at once (the oracle batches every position of a sequence).

    logits [R, Vd] / aux [R, H]: the draft's extend output at each root's last verified position pos[r]; kv:
    per-layer (k, v) [1 or R, nkv, S, hd] (shared, or per root right-padded to prefix_len[r]). Returns per root
    (tokens, parents, scores) in SGLang's sorted candidate order (parents first, -1 = the root token)."""
    k, R, dev = p.speculative_eagle_topk, logits.shape[0], logits.device
    topk_p, topk_i = _topk(torch.softmax(logits.float(), -1), k)  # [R, k]
    topk_i = draft.to_target_ids(topk_i)
    cand_tok, cand_score, cand_parent = [topk_i], [topk_p], [torch.full((R, k), -1, device=dev)]
    lane_cand = torch.arange(k, device=dev).expand(R, k)
    scores = topk_p
    hidden = aux.repeat_interleave(k, 0)  # lanes share the root state
    input_ids = topk_i.reshape(-1)
    S = kv[0][0].shape[2]
    unpadded = all(n == S for n in prefix_len)
    prefix_vis = torch.arange(S, device=dev)[None, :] < torch.tensor(prefix_len, device=dev)[:, None]  # [R, S]
    prefix_vis = prefix_vis.repeat_interleave(k, 0)[:, None, None, :]  # [R*k, 1, 1, S]
    base = torch.tensor(pos, device=dev).repeat_interleave(k)[:, None]

    def per_lane(t):  # a root's cache once per lane, then the lane's own history (generate_draft_decode_kv_indices)
        return t.expand(R * k, -1, -1, -1) if t.shape[0] == 1 else t.repeat_interleave(k, 0)

    lanes = [(per_lane(pk), per_lane(pv)) for pk, pv in kv]
    lane_kv = None
    offset = k
    for i in range(1, p.speculative_num_steps):
        # a one-token query sees its whole prefix and lane: a mask only hides the padding of shorter prefixes
        mask = None if unpadded else torch.cat([prefix_vis, prefix_vis.new_ones(R * k, 1, 1, i)], -1)
        lg, hid, new = draft(input_ids[:, None], hidden[:, None], base + i, past_kv=_cat_kv(lanes, lane_kv), mask=mask)
        lane_kv = _cat_kv(lane_kv, new)
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


def walk_tree(tokens: list[int], parents: list[int], want) -> list[int]:
    """Greedy acceptance: from the root (-1), step to the child whose token is `want(node, depth)` (the target's
    next token; None stops). Returns the accepted node indices. Serving passes the verify argmax, the oracle
    the target's continuation."""
    path, cur = [], -1
    while (t := want(cur, len(path))) is not None:
        cur = next((j for j, (tk, pa) in enumerate(zip(tokens, parents)) if pa == cur and tk == t), None)
        if cur is None:
            break
        path.append(cur)
    return path


def prepare_draft(draft, target, wiring: Wiring):
    """The draft as the serving stack would run it under `wiring` (a cached faulted copy if needed)."""
    alg = wiring.algorithm.upper()
    if not wiring.dropped_keys and alg == "EAGLE3":
        return draft
    copies = draft.__dict__.setdefault("_wired_copies", {})
    key = (tuple(wiring.dropped_keys), alg)
    if key not in copies:
        d = _deep_except_embed(draft)
        if wiring.dropped_keys:
            reset_params(d, wiring.dropped_keys)
        if alg != "EAGLE3":
            d.attach_target(target, alg)
        copies[key] = d
    return copies[key]


def _deep_except_embed(draft):
    """Deep copy that shares the (large, target-owned) embedding and head tensors."""
    memo = {id(draft.embed_tokens.weight): draft.embed_tokens.weight}
    if draft.lm_head is not None:
        memo[id(draft.lm_head.weight)] = draft.lm_head.weight
    if "_wired_copies" in draft.__dict__:
        memo[id(draft.__dict__["_wired_copies"])] = {}
    return copy.deepcopy(draft, memo)


@dataclass(eq=False)
class Sequence:
    """One request's decoding state: its tokens, its target and draft caches, its acceptance record."""

    prompt: list[int]
    max_new_tokens: int
    eos: frozenset = frozenset()
    tokens: list[int] = field(default_factory=list)  # new tokens, the prefill token first
    accept_lengths: list[int] = field(default_factory=list)  # tokens kept per verify step, bonus included
    accepted_drafts: list[int] = field(default_factory=list)  # draft tokens accepted per verify step
    done: bool = False
    kv: object = None  # kit.reference.target.SeqKV
    draft_kv: list | None = None  # per draft layer (k, v) [1, nkv, S, hd] over verified positions
    draft_logits: torch.Tensor | None = None  # [Vd] at the last extended position
    draft_hidden: torch.Tensor | None = None  # [H] next-step hidden at the last extended position
    draft_pos: int = -1  # position of the last extended token
    prefilled: int = 0  # prompt tokens already in the target cache (chunked prefill: a few steps)

    @property
    def prefilling(self) -> bool:
        return self.prefilled < len(self.prompt)

    def take(self, emitted: list[int]) -> list[int]:
        """Append what a step produced, cut at max_new_tokens or after an EOS (the scheduler's finish check)."""
        kept = emitted[: max(0, self.max_new_tokens - len(self.tokens))]
        kept = kept[: next((i + 1 for i, t in enumerate(kept) if t in self.eos), len(kept))]
        self.tokens += kept
        if len(self.tokens) >= self.max_new_tokens or (kept and kept[-1] in self.eos):
            self.done = True
        return kept


class BatchDecoder:
    """One decoding step at a time over any set of sequences: greedy without a draft, speculative with one.

    `step(seqs)` prefills new sequences and advances the others by one decode or draft + verify step, all in
    one target forward, and returns the tokens each gained. `times`: seconds per phase; `steps`: verify steps.
    chunked_prefill_size (SGLang's flag; None or -1: off) caps the prompt tokens one step prefills over all
    sequences: long prompts go a chunk per step, the others' decodes going on between."""

    def __init__(
        self,
        target,
        draft=None,
        params: SpecParams | None = None,
        wiring: Wiring | None = None,
        plan=None,
        chunked_prefill_size: int | None = None,
    ):
        self.chunked_prefill_size = chunked_prefill_size if chunked_prefill_size and chunked_prefill_size > 0 else None
        self.draft = self.params = None
        points = None
        if draft is not None:
            wiring = wiring or Wiring()
            self.params = (params or SpecParams(3, 1, 4)).resolved()
            self.draft = prepare_draft(draft, target, wiring)
            points = capture_points_for(self.draft, target, wiring)
        self.runner = RaggedTarget(target, points, plan)  # plan None: measured on this CPU (kit.reference.target)
        if self.draft is not None:
            self.draft.use_plan(self.runner.plan)
        self.times = {"draft": 0.0, "target": 0.0, "accept": 0.0, "extend": 0.0}
        self.steps = 0

    @torch.inference_mode()
    def step(self, seqs: list[Sequence]) -> list[list[int]]:
        t0 = time.perf_counter()
        live = [s for s in seqs if not s.prefilling]
        trees = dict(zip(map(id, live), self._draft_trees(live))) if self.draft is not None and live else {}
        t1 = time.perf_counter()
        budget = self.chunked_prefill_size or sum(len(s.prompt) for s in seqs)
        work = []  # (sequence, piece) for every sequence this step advances
        for s in seqs:
            if s.prefilling:
                if budget <= 0:
                    continue
                if s.kv is None:
                    s.kv = self.runner.new_kv(len(s.prompt) + s.max_new_tokens + 8)
                n = min(len(s.prompt) - s.prefilled, budget)
                budget -= n
                work.append((s, Piece(s.kv, s.prompt[s.prefilled : s.prefilled + n], logits="last")))
            elif self.draft is None:
                work.append((s, Piece(s.kv, [s.tokens[-1]])))
            else:
                toks, pars = trees[id(s)]
                chain = all(pa == j - 1 for j, pa in enumerate(pars))
                work.append((s, Piece(s.kv, [s.tokens[-1]] + toks, None if chain else [-1] + [pa + 1 for pa in pars])))
        starts = [pc.kv.len for _, pc in work]
        res = self.runner.forward([pc for _, pc in work])
        t2 = time.perf_counter()
        gained: dict[int, list[int]] = {}
        solo, extend = [], []  # draft extends: prompt chunks one by one (no padding to a long chunk); decodes batched
        for (s, pc), (pred, feats), P in zip(work, res, starts):
            if pc.logits == "last":  # a prompt chunk: the draft extends over it; its last one gives the first token
                a = s.prefilled
                s.prefilled += len(pc.ids)
                gained[id(s)] = [] if s.prefilling else s.take(pred)
                if self.draft is not None and not s.done:
                    solo.append((s, list(s.prompt[a + 1 : s.prefilled + 1]) + ([] if s.prefilling else pred), feats, a))
                continue
            self.steps += 1
            if self.draft is None:
                gained[id(s)] = s.take(pred)
                continue
            toks, pars = trees[id(s)]
            path = walk_tree(toks, pars, lambda node, depth, pred=pred: pred[node + 1])
            new = [toks[j] for j in path]
            keep = [0] + [1 + j for j in path]
            s.kv.keep(P, keep)
            got = gained[id(s)] = s.take(new + [pred[keep[-1]]])
            s.accept_lengths.append(len(got))
            s.accepted_drafts.append(len(new))
            if not s.done:
                extend.append((s, new + [pred[keep[-1]]], feats[keep], s.draft_pos + 1))
        t3 = time.perf_counter()
        for e in solo:
            self._extend([e])
        if extend:
            self._extend(extend)
        t4 = time.perf_counter()
        for k, dt in zip(self.times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            self.times[k] += dt
        return [gained.get(id(s), []) for s in seqs]

    def _draft_trees(self, seqs: list[Sequence]) -> list[tuple[list[int], list[int]]]:
        kv, lens = self._draft_cache(seqs)
        logits, hidden = torch.stack([s.draft_logits for s in seqs]), torch.stack([s.draft_hidden for s in seqs])
        out = draft_trees(
            self.draft, logits, hidden, kv, prefix_len=lens, pos=[s.draft_pos for s in seqs], p=self.params
        )
        return [(t, p) for t, p, _ in out]

    @staticmethod
    def _draft_cache(seqs: list[Sequence]):
        """The sequences' draft caches as one right-padded batch [R, nkv, S, hd] (as is for one sequence)."""
        lens = [s.draft_kv[0][0].shape[2] for s in seqs]
        if len(seqs) == 1:
            return seqs[0].draft_kv, lens
        S = max(lens)

        def batch(ts):  # one layer's k (or v) of every sequence, right-padded with zeros to S
            return torch.cat([F.pad(t, (0, 0, 0, S - t.shape[2])) for t in ts])

        return [tuple(map(batch, zip(*layer))) for layer in zip(*(s.draft_kv for s in seqs))], lens

    def _extend(self, items) -> None:
        """Draft extend of (sequence, tokens, target features, first position) items in one padded batch; token
        i follows position start + i and is fed the target's features there."""
        seqs = [it[0] for it in items]
        dev = items[0][2].device
        R = len(items)
        ids = pad_sequence([torch.tensor(toks, device=dev) for _, toks, _, _ in items], batch_first=True)  # [R, T]
        hid = pad_sequence([feats for _, _, feats, _ in items], batch_first=True)
        T = ids.shape[1]
        pos = torch.tensor([start for *_, start in items], device=dev)[:, None] + torch.arange(T, device=dev)
        kv = mask = None
        if seqs[0].draft_kv is not None:
            kv, lens = self._draft_cache(seqs)
            if R > 1:  # past entries beyond each sequence's length are padding; new tokens causal
                S = kv[0][0].shape[2]
                mask = torch.zeros(R, 1, T, S + T, dtype=torch.bool, device=dev)
                for r in range(R):
                    mask[r, 0, :, : lens[r]] = True
                mask[:, 0, :, S:] = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
        last = torch.tensor([len(it[1]) - 1 for it in items], device=dev)
        logits, hidden, new = self.draft(ids, hid, pos, past_kv=kv, mask=mask, logits_at=last)
        for r, (s, toks, _, start) in enumerate(items):
            n = len(toks)
            add = [(k[r : r + 1, :, :n], v[r : r + 1, :, :n]) for k, v in new]
            s.draft_kv = _cat_kv(s.draft_kv, add)
            s.draft_logits, s.draft_hidden, s.draft_pos = logits[r, 0], hidden[r, n - 1], start + n - 1


def decode_all(decoder: BatchDecoder, rows: list[list[int]], max_new_tokens: int, eos_token_id=None) -> list[Sequence]:
    """Run sequences to their ends together, one batched step at a time (eos_token_id: int, list or None)."""
    eos = frozenset(eos_ids(eos_token_id))
    seqs = [Sequence(list(r), max_new_tokens, eos) for r in rows]
    while live := [s for s in seqs if not s.done]:
        decoder.step(live)
    return seqs


def decode_one(decoder: BatchDecoder, input_ids: list[int], max_new_tokens: int, eos_token_id=None) -> Sequence:
    """Run one sequence to its end through `decoder`."""
    return decode_all(decoder, [input_ids], max_new_tokens, eos_token_id)[0]


def speculative_generate(
    target,
    draft,
    input_ids: list[int],
    max_new_tokens: int,
    params: SpecParams,
    wiring: Wiring = Wiring(),
    eos_token_id: int | None = None,
) -> SpecResult:
    """Greedy speculative decoding of one request, as SGLang runs EAGLE-3."""
    dec = BatchDecoder(target, draft, params, wiring)
    s = decode_one(dec, input_ids, max_new_tokens, eos_token_id)
    return SpecResult(
        tokens=s.tokens,
        accept_lengths=s.accept_lengths,
        verify_steps=len(s.accept_lengths),
        draft_time_s=dec.times["draft"] + dec.times["extend"],
        verify_time_s=dec.times["target"] + dec.times["accept"],
        accepted_drafts=s.accepted_drafts,
    )


def greedy_generate(target, input_ids: list[int], max_new_tokens: int, eos_token_id: int | None = None) -> SpecResult:
    """Plain greedy decoding through the same engine (verify_steps 0; verify_time_s is the decode time)."""
    dec = BatchDecoder(target)
    s = decode_one(dec, input_ids, max_new_tokens, eos_token_id)
    return SpecResult(tokens=s.tokens, accept_lengths=[], verify_steps=0, verify_time_s=sum(dec.times.values()))
