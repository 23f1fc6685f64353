"""Batch-1 speculative (chain) and greedy decoding captured in CUDA graphs, for timing on a GPU.

Why: the reference engine (`kit.reference.speculate.BatchDecoder` over `RaggedTarget`) is eager
PyTorch with per-sequence Python loops and host syncs; on a GPU it is bound by the host (about
1,200 kernel launches per token), so its speculative path measures Python, not the algorithm.
Here every decode step is one CUDA graph replay and one host sync, so speculative and greedy
decoding are compared on what the GPU does. A side room (docs/architecture.md): `kit demo --gpu`
(`kit.demo_gpu`), `bench/gpu_graphs.py` and tests import it, the core never does.

How: static shapes throughout. The target KV cache is [layers, 2, kv heads, capacity, head dim] and
the draft's the same over its layers; the current lengths live in device tensors; every attention
runs over the whole capacity with a mask built on the device from the positions (key <= query
position), and new K/V entries are written with `index_copy_` at their positions. The HF modules
compute norms, projections, rotary tables and MLPs (as `RaggedTarget` does), the draft's own
modules its layers (as `Eagle3Draft.forward`), so the numerics are the models' own.

* `GraphedGreedy`: one graph per greedy step (T = 1).
* `GraphedChainDecoder`: one graph per speculative step of a chain (`speculative_eagle_topk == 1`,
  `num_draft_tokens == num_steps + 1`), exactly `kit.reference.speculate`'s EAGLE-3 step: the draft
  chain from the last extend output (top-1 of the softmax, `to_target_ids`), the verify forward of
  root + drafts, greedy acceptance on the device (`chain_accept`: draft == target argmax, cumulative
  product, count), the bonus token, and the draft extend over the accepted tokens + bonus fed with
  the target's features at their positions. In a chain the accepted tokens are the verify argmaxes
  themselves (an accepted draft equals the target's argmax before it), so the extend runs over all
  `num_draft_tokens` argmaxes and only the first n + 1 count: the lengths advance by n + 1 and the
  rest is overwritten next step; accepted KV entries are a contiguous prefix, so nothing is compacted.
  The host reads the argmaxes and n once per step.

The prefill runs the same static-shape code eagerly (its length varies). Outputs equal greedy
decoding up to the rounding of different kernels (the full-capacity masked attention vs the eager
engine's exact-length one): identical in fp32 with TF32 off on the benchmark prompts, while bf16 can
flip near-ties (as the eager engine does; docs/performance.md).

    dec = GraphedChainDecoder(target, draft, SpecParams(3, 1, 4), Wiring(), capacity=1024)
    res = dec.generate(ids, 64)            # SpecResult: tokens, accept_lengths, verify_steps
    GraphedGreedy(target, capacity=1024).generate(ids, 64).tokens == res.tokens

How to run: on a CUDA host, `python bench/gpu_graphs.py` (tok/s, accept length and where the time
goes, eager vs graphed); tests: `python -m pytest kit/tests/reference/test_graphs.py` (the CUDA ones
skip without a GPU; the static-shape code itself is checked on the CPU against `BatchDecoder`).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from kit.findings import KitInputError
from kit.reference.speculate import Sequence, SpecResult, Wiring, capture_points_for, prepare_draft
from kit.reference.target import RaggedTarget, eos_ids
from kit.sglang.params import SpecParams


def chain_accept(drafts: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
    """Greedy acceptance of a chain on the device: how many drafts the target accepts (0-d long).

    drafts [S]: the draft tokens d1..dS; pred [S + 1]: the target's argmax after the root and after
    each draft. d_i is accepted while every d_j (j <= i) equals pred[j - 1]; the bonus is pred[n]."""
    return (drafts == pred[: drafts.shape[0]]).long().cumprod(0).sum()


def draft_top1(draft, logits: torch.Tensor) -> torch.Tensor:
    """The chain's next draft token in target ids: max of the softmax (SGLang's fast_topk, k = 1)."""
    return draft.to_target_ids(torch.softmax(logits.float(), -1).max(-1).indices)


class StaticTarget:
    """A Llama-layout HF target over one sequence with a fixed-capacity KV cache (static shapes)."""

    def __init__(self, model, points: list[int] | None, capacity: int):
        self.rt = RaggedTarget(model, points)  # the layout checks, head geometry and module handles
        rt = self.rt
        self.capacity = capacity
        self.kv = torch.zeros(len(rt.layers), 2, rt.nkv, capacity, rt.hd, dtype=rt.dtype, device=rt.device)
        self.keys = torch.arange(capacity, device=rt.device)

    def forward(self, ids: torch.Tensor, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [T] at positions start..start+T-1 (start: 0-d long on the device), appended to the cache.

        Returns (argmax ids [T], features [T, W]) as `RaggedTarget.forward` computes them."""
        rt, T = self.rt, ids.shape[0]
        pos = start + torch.arange(T, device=ids.device)
        x = rt.dec.embed_tokens(ids)  # [T, H]
        cos, sin = rt.dec.rotary_emb(x[None], pos[None])
        mask = self.keys[None, :] <= pos[:, None]  # [T, capacity]
        want = set(rt.points or ())
        store = {0: x} if 0 in want else {}
        rep = rt.nh // rt.nkv
        for li, layer in enumerate(rt.layers):
            q, k, v = rt.qkv(layer, x, cos, sin)
            kb = self.kv[li]
            kb[0].index_copy_(1, pos, k[0])
            kb[1].index_copy_(1, pos, v[0])
            K, V = kb[0][None], kb[1][None]
            if rep > 1:  # HF's repeat_kv
                K, V = K.repeat_interleave(rep, 1), V.repeat_interleave(rep, 1)
            o = F.scaled_dot_product_attention(q, K, V, attn_mask=mask, scale=rt.scale)
            x = rt.finish(layer, x, o[0].transpose(0, 1).reshape(T, rt.nh * rt.hd))
            if li + 1 in want:
                store[li + 1] = x
        normed = rt.dec.norm(x)
        pred = rt.model.lm_head(normed).argmax(-1)
        feats = torch.cat([store[p] for p in rt.points], -1) if rt.points else normed
        return pred, feats


class StaticDraft:
    """An Eagle3Draft over one sequence with a fixed-capacity KV cache indexed by draft position."""

    def __init__(self, draft, capacity: int):
        self.d = draft
        w = draft.fc.weight
        a = draft.layers[0].self_attn
        self.kv = torch.zeros(len(draft.layers), 2, a.nkv, capacity, a.hd, dtype=w.dtype, device=w.device)
        self.keys = torch.arange(capacity, device=w.device)

    def forward(self, ids: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor):
        """ids [T], hidden [T, W], pos [T]: the tokens' K/V land at their positions; each token sees
        every entry at a position <= its own (the prefix, the chain's earlier steps, the extend's
        earlier tokens). Returns (logits [T, Vd'], next-step hidden [T, H])."""
        d = self.d
        embeds = d.embed_tokens(ids[None])
        h = d.project(hidden[None], embeds.shape[-1])
        mask = self.keys[None, :] <= pos[:, None]
        residual = None
        for i, layer in enumerate(d.layers):
            x, residual = layer.pre_attention(embeds, h, residual)
            q, k, v = layer.self_attn.qkv(x, pos[None], d.inv_freq)
            kb = self.kv[i]
            kb[0].index_copy_(1, pos, k[0])
            kb[1].index_copy_(1, pos, v[0])
            a = layer.self_attn.attend(q, kb[0][None], kb[1][None], mask)
            h, residual = layer.post_attention(a, residual)
        pre = h + residual
        normed = d.norm(pre)
        return d.logits(normed)[0], (normed if d.spec.norm_output else pre)[0]


class ChainCore:
    """The static-shape state and steps of batch-1 decoding, on any device (graphs are added on top).

    Device state: the target length `tgt_len` (entries in the target cache), the draft length
    `drf_len` (= the last extended draft position + 1), the last emitted token `last`, the next
    step's first draft token `d_first` and its hidden state `d_hidden`; `out` holds what the host
    reads after a step: the argmaxes, then n (speculative) or the one new token (greedy)."""

    def __init__(self, target, draft=None, params: SpecParams | None = None, wiring: Wiring | None = None,
                 capacity: int = 1024):  # fmt: skip
        self.params = self.draft = None
        points = None
        if draft is not None:
            p = (params or SpecParams(3, 1, 4)).resolved()
            if p.speculative_eagle_topk != 1 or p.speculative_num_draft_tokens != p.speculative_num_steps + 1:
                raise KitInputError(
                    f"graphed decoding runs chains only (topk 1, num_draft_tokens = num_steps + 1); got {p.label()}"
                )
            wiring = wiring or Wiring()
            self.params = p
            self.draft = StaticDraft(prepare_draft(draft, target, wiring), capacity)
            points = capture_points_for(self.draft.d, target, wiring)
        self.target = StaticTarget(target, points, capacity)
        self.capacity = capacity
        dev = self.target.rt.device
        self.device = dev
        self.tgt_len = torch.zeros((), dtype=torch.long, device=dev)
        self.drf_len = torch.zeros((), dtype=torch.long, device=dev)
        self.last = torch.zeros(1, dtype=torch.long, device=dev)
        self.d_first = torch.zeros(1, dtype=torch.long, device=dev)
        H = self.draft.d.spec.hidden_size if self.draft is not None else 1
        self.d_hidden = torch.zeros(H, dtype=self.target.rt.dtype, device=dev)
        S = self.params.speculative_num_steps if self.params else 0
        self.out = torch.zeros(S + 2, dtype=torch.long, device=dev)
        self.steps = S
        self.prefill_s = 0.0  # host seconds of the last prefill (synced)

    # -- prefill (eager: its length varies) ---------------------------------------------------
    def check_room(self, prompt_len: int, max_new_tokens: int) -> None:
        need = prompt_len + max_new_tokens + self.steps + 2
        if need > self.capacity:
            raise KitInputError(
                f"prompt {prompt_len} + {max_new_tokens} new tokens need a capacity of {need}; "
                f"the decoder was built with {self.capacity}"
            )

    def prefill(self, prompt: list[int], extend: bool = True) -> int:
        """Fill the caches from the prompt; returns the first new token (one host sync)."""
        dev = self.device
        ids = torch.tensor(prompt, dtype=torch.long, device=dev)
        self.tgt_len.zero_()
        pred, feats = self.target.forward(ids, self.tgt_len)
        self.tgt_len.fill_(len(prompt))
        self.last.copy_(pred[-1:])
        if self.draft is not None and extend:
            ext = torch.cat([ids[1:], pred[-1:]])
            logits, hid = self.draft.forward(ext, feats, torch.arange(len(prompt), device=dev))
            self.drf_len.fill_(len(prompt))
            self.d_first.copy_(draft_top1(self.draft.d, logits[-1:]))
            self.d_hidden.copy_(hid[-1])
        return int(pred[-1])

    # -- one step (the graphed part) ----------------------------------------------------------
    def greedy_step(self) -> None:
        pred, _ = self.target.forward(self.last, self.tgt_len)
        self.last.copy_(pred)
        self.tgt_len.add_(1)
        self.out[:1].copy_(pred)

    def draft_chain(self) -> torch.Tensor:
        """Drafts d1..dS [S]: d1 from the last extend, then S - 1 draft forwards along the chain."""
        toks, h = [self.d_first], self.d_hidden[None]
        for i in range(1, self.steps):
            logits, hid = self.draft.forward(toks[-1], h, (self.drf_len - 1 + i)[None])
            toks.append(draft_top1(self.draft.d, logits))
            h = hid
        return torch.cat(toks)

    def verify(self, drafts: torch.Tensor):
        return self.target.forward(torch.cat([self.last, drafts]), self.tgt_len)

    def accept(self, drafts: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
        n = chain_accept(drafts, pred)
        self.out[:-1].copy_(pred)
        self.out[-1:].copy_(n[None])
        self.last.copy_(pred.index_select(0, n[None]))
        return n

    def extend(self, pred: torch.Tensor, feats: torch.Tensor, n: torch.Tensor) -> None:
        """Draft extend over the accepted drafts + bonus (= pred[:n + 1]), padded to S + 1; lengths advance."""
        pos = self.drf_len + torch.arange(pred.shape[0], device=pred.device)
        logits, hid = self.draft.forward(pred, feats, pos)
        self.d_first.copy_(draft_top1(self.draft.d, logits.index_select(0, n[None])))
        self.d_hidden.copy_(hid.index_select(0, n[None])[0])
        self.tgt_len.add_(n + 1)
        self.drf_len.add_(n + 1)

    def spec_step(self) -> None:
        drafts = self.draft_chain()
        pred, feats = self.verify(drafts)
        n = self.accept(drafts, pred)
        self.extend(pred, feats, n)

    # -- the host loops -----------------------------------------------------------------------
    def _start(self, prompt: list[int], max_new_tokens: int, eos, extend: bool) -> Sequence:
        """A sequence with its prefill token taken (prefill_s: the prefill's host seconds)."""
        self.check_room(len(prompt), max_new_tokens)
        s = Sequence(list(prompt), max_new_tokens, frozenset(eos))
        t0 = time.perf_counter()
        s.take([self.prefill(s.prompt, extend=extend)])
        self.prefill_s = time.perf_counter() - t0
        return s

    def run_greedy(self, prompt: list[int], max_new_tokens: int, eos=(), step=None) -> Sequence:
        step = step or self.greedy_step
        s = self._start(prompt, max_new_tokens, eos, extend=False)
        while not s.done:
            step()
            s.take([int(self.out[0])])
        return s

    def run_spec(self, prompt: list[int], max_new_tokens: int, eos=(), step=None) -> Sequence:
        step = step or self.spec_step
        s = self._start(prompt, max_new_tokens, eos, extend=True)
        while not s.done:
            step()
            o = self.out.tolist()  # the one sync per step
            n = o[-1]
            kept = s.take(o[: n + 1])
            s.accept_lengths.append(len(kept))
            s.accepted_drafts.append(n)
        return s


class _Graphed:
    """Shared CUDA-graph plumbing: capture a step after a warm-up on a side stream; time replays."""

    def _require_cuda(self, model) -> None:
        dev = next(model.parameters()).device
        if dev.type != "cuda":
            raise KitInputError(f"graphed decoding needs the models on a CUDA device; they are on {dev}")

    @torch.inference_mode()
    def _capture(self, fn, warmup: int = 2) -> torch.cuda.CUDAGraph:
        core = self.core
        core.tgt_len.zero_()
        core.drf_len.fill_(1)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                core.tgt_len.zero_()
                core.drf_len.fill_(1)
                fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        core.tgt_len.zero_()
        core.drf_len.fill_(1)
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        return g

    def _timed(self, g: torch.cuda.CUDAGraph):
        """Replay `g`; with profile on, CUDA events around it add its device time to self.times."""
        if not self.profile:
            return g.replay
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def step():
            start.record()
            g.replay()
            end.record()
            end.synchronize()
            self.times["gpu"] += start.elapsed_time(end) / 1e3

        return step

    def reset_times(self) -> None:
        self.times = {"prefill": 0.0, "steps_wall": 0.0, "gpu": 0.0}
        self.steps = 0

    def _run(self, run, input_ids: list[int], max_new_tokens: int, eos_token_id) -> tuple[Sequence, float]:
        """One request through `run` (ChainCore.run_greedy / run_spec) with the graph's replay as its step;
        returns the sequence and its wall seconds, and books prefill and step time."""
        t0 = time.perf_counter()
        s = run(list(input_ids), max_new_tokens, eos_ids(eos_token_id), step=self._timed(self.graph))
        dt = time.perf_counter() - t0
        self.times["prefill"] += self.core.prefill_s
        self.times["steps_wall"] += dt - self.core.prefill_s
        return s, dt


class GraphedGreedy(_Graphed):
    """Greedy decoding of one sequence, each step one CUDA graph replay + one host read."""

    def __init__(self, target, capacity: int = 1024, profile: bool = False):
        self._require_cuda(target)
        self.core = ChainCore(target, capacity=capacity)
        self.profile = profile
        self.reset_times()
        with torch.inference_mode():
            self.graph = self._capture(self.core.greedy_step)

    @torch.inference_mode()
    def generate(self, input_ids: list[int], max_new_tokens: int, eos_token_id=None) -> SpecResult:
        s, dt = self._run(self.core.run_greedy, input_ids, max_new_tokens, eos_token_id)
        self.steps += max(len(s.tokens) - 1, 0)
        return SpecResult(
            tokens=s.tokens, accept_lengths=[], verify_steps=0, verify_time_s=dt, prefill_time_s=self.core.prefill_s
        )


class GraphedChainDecoder(_Graphed):
    """Speculative decoding of one sequence (EAGLE-3 chain), each step one CUDA graph replay + one host read.

    `generate` returns what `kit.reference.speculate.speculative_generate` returns for the same models,
    params and wiring. `phase_times(ids, steps)` replays the step as four graphs (draft chain, verify,
    acceptance, extend) with CUDA events between them: the device time of each phase."""

    def __init__(self, target, draft, params: SpecParams | None = None, wiring: Wiring | None = None,
                 capacity: int = 1024, profile: bool = False):  # fmt: skip
        self._require_cuda(target)
        self.core = ChainCore(target, draft, params, wiring, capacity)
        self.params = self.core.params
        self.profile = profile
        self.reset_times()
        with torch.inference_mode():
            self.graph = self._capture(self.core.spec_step)
        self._phases = None

    @torch.inference_mode()
    def generate(self, input_ids: list[int], max_new_tokens: int, eos_token_id=None) -> SpecResult:
        s, dt = self._run(self.core.run_spec, input_ids, max_new_tokens, eos_token_id)
        self.steps += len(s.accept_lengths)
        return SpecResult(
            tokens=s.tokens,
            accept_lengths=s.accept_lengths,
            verify_steps=len(s.accept_lengths),
            verify_time_s=dt,
            prefill_time_s=self.core.prefill_s,
            accepted_drafts=s.accepted_drafts,
        )

    @torch.inference_mode()
    def phase_times(self, input_ids: list[int], steps: int) -> dict[str, float]:
        """Device milliseconds per step of each phase, from `steps` steps after a prefill of input_ids."""
        core = self.core
        if self._phases is None:
            box: dict = {}

            def chain():
                box["drafts"] = core.draft_chain()

            def verify():
                box["pred"], box["feats"] = core.verify(box["drafts"])

            def accept():
                box["n"] = core.accept(box["drafts"], box["pred"])

            def extend():
                core.extend(box["pred"], box["feats"], box["n"])

            # captured in order, each phase reads the tensors the previous phase's graph writes (the
            # capture leaves them in `box`; a graph keeps the addresses it was captured with)
            self._phases = [self._capture(fn, warmup=1) for fn in (chain, verify, accept, extend)]
        names = ("draft_chain", "verify", "accept", "extend")
        core.check_room(len(input_ids), steps * (core.steps + 1))
        core.prefill(list(input_ids))
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(5)]
        tot = dict.fromkeys(names, 0.0)
        for _ in range(steps):
            ev[0].record()
            for g, e in zip(self._phases, ev[1:]):
                g.replay()
                e.record()
            ev[-1].synchronize()
            for i, name in enumerate(names):
                tot[name] += ev[i].elapsed_time(ev[i + 1])
        return {k: v / steps for k, v in tot.items()}
