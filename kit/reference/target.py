"""Running an HF target the way the EAGLE-3 oracle, the trainer and the reference server need it.

* `TargetCapture`: hooks recording the residual stream at capture points p (p = output of layer p-1, 0 the
  embeddings, L the final pre-norm state), or the final post-norm state (aux capture off);
* `reference_greedy`: the target's plain greedy continuation (HF `generate`), the ground truth;
* `RaggedTarget`: the serving path: one forward over the new tokens of many sequences, each with its own KV
  cache (`SeqKV`), causal or with a draft-tree mask, matmuls run as this CPU's measured `GemmPlan` says;
* `batch_continue`: many continuations at once (left-padded `generate`), the trainer's data.

    with TargetCapture(model, [2, 15, 27]) as cap:
        model(input_ids=ids)
    feats = cap.features()          # [B, T, 3 * hidden]
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

import kit
from kit.findings import KitInputError
from kit.models import cache_dir, cache_lock, measurement_machine, write_cache_json
from kit.reference.llama import LAYOUT_TYPES, apply_rotary_pos_emb


def decoder_of(model):
    base = getattr(model, "model", None)
    return base if base is not None and hasattr(base, "layers") else model.get_decoder()


def default_points(L: int) -> list[int]:
    return [2, L // 2, L - 3]


class TargetCapture:
    """Forward hooks that record the residual stream at capture points during a target forward."""

    def __init__(self, model, points: list[int] | None, accumulate: bool = False):
        self.model, self.points, self.accumulate = model, points, accumulate
        self.store: dict = {}
        self.handles = []

    def __enter__(self):
        dec = decoder_of(self.model)
        L = len(dec.layers)

        def hook(key):
            def fn(_m, _i, out):
                h = out[0] if isinstance(out, tuple) else out
                if self.accumulate:  # KV-cached decoding: one forward per new token, kept in order
                    self.store.setdefault(key, []).append(h)
                else:
                    self.store[key] = h

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
        """[B, T, W]: the captured states concatenated in capture order (k*Ht), or the final one (Ht);
        with `accumulate`, T spans every forward run inside the block (prefill, then each decode step)."""
        get = (lambda k: torch.cat(self.store[k], 1)) if self.accumulate else self.store.__getitem__
        if self.points is None:
            return get("final")
        return torch.cat([get(p) for p in self.points], dim=-1)


def tree_layout(parents: list[int], prefix: int) -> tuple[list[int], torch.Tensor]:
    """Depths and visibility [T, prefix + T] (True = attend) of a draft tree after a prefix: node j (parent
    parents[j], -1 = none) sees the prefix, itself and its ancestors, at position prefix + depth(j)."""
    T = len(parents)
    depth = [0] * T
    vis = torch.zeros(T, prefix + T, dtype=torch.bool)  # built on the host, moved by the caller
    vis[:, :prefix] = True
    for j in range(T):
        a = j
        while a >= 0:
            vis[j, prefix + a] = True
            a = parents[a]
        depth[j] = 0 if parents[j] < 0 else depth[parents[j]] + 1
    return depth, vis


def eos_ids(eos_token_id) -> list[int]:
    """An EOS given as an int, a list of ints or None, as a list."""
    return [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or [])


def reference_greedy(model, input_ids: list[int], max_new_tokens: int, eos_token_id=None) -> list[int]:
    """The target's plain greedy continuation (HF `generate`, batch 1, cut after the first EOS): the ground truth."""
    x = torch.tensor([list(input_ids)], device=next(model.parameters()).device)
    eos = eos_ids(eos_token_id)
    how = {"do_sample": False, "eos_token_id": eos or None, "pad_token_id": eos[0] if eos else 0}
    with torch.inference_mode():
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens, **how)
    row = out[0, x.shape[1] :].tolist()
    return row[: next((i + 1 for i, t in enumerate(row) if t in eos), len(row))]


PLAN_ROWS = range(1, 7)  # row counts of a decode step, a verify, or a few requests batched
WAYS = ("linear", "transposed", "packed")  # how GemmPlan computes an m-row linear (see its docstring)


@dataclass(frozen=True)
class GemmPlan:
    """How an n-row linear runs on this CPU, per weight shape: as m >= n rows (last row repeated, extra outputs
    dropped) one of `WAYS`: "linear" x @ W^T, "transposed" W @ x^T, "packed" x @ W^T on an MKL-reordered copy.
    Same products, different BLAS kernels, and CPUs differ (2-core EPYC AVX2: a one-row GEMV ran at half the
    speed of W @ x^T over four rows; a Xeon with AVX-512: W @ x^T took twice x @ W^T).

    `half`: every bias-free fp32 linear runs instead on its weight rounded to fp16 and packed by FBGEMM, fp32
    inputs and accumulation: half the bytes streamed (EPYC, SmolLM2: 17-20 ms against 37-43 ms). A precision
    choice, so made for the whole model: decode and verify see the same weights, greedy and speculative agree."""

    shapes: dict[tuple[int, int], dict[int, tuple[int, str]]]  # weight shape -> n -> (m, way in WAYS)
    why: str = ""  # every timing, for the plan's record
    half: bool = False
    half_why: str = ""  # the fp16 weights' verdict and the timings it rests on ("" when not measured)

    def to_json(self) -> dict:
        rows = {f"{o}x{i}": rows for (o, i), rows in self.shapes.items()}
        return {"shapes": rows, "why": self.why, "half": self.half, "half_why": self.half_why}

    def describe(self) -> str:
        """One line for a progress or log line: what the products run on, and the measurement that chose it."""
        if self.half:
            return self.half_why or "fp16 weights (FBGEMM)"
        what = f"fp32, planned for {len(self.shapes)} weight shapes" if self.shapes else f"fp32, {MODULE_PATH.why}"
        return f"{what} ({self.half_why})" if self.half_why else what

    @classmethod
    def from_json(cls, doc: dict) -> GemmPlan:
        shapes = {}
        for key, rows in doc["shapes"].items():
            o, i = key.split("x")
            shapes[(int(o), int(i))] = {int(n): (int(m), w) for n, (m, w) in rows.items()}
        return cls(shapes, doc["why"], bool(doc.get("half", False)), str(doc.get("half_why", "")))


MODULE_PATH = GemmPlan({}, "the module's own path")


@functools.cache
def _mkl_packing() -> bool:
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")


def can_pack(w: torch.Tensor) -> bool:
    """Whether this torch can run `w` (fp32, on the CPU) as an MKL-packed weight."""
    return w.dtype == torch.float32 and w.device.type == "cpu" and _mkl_packing()


@functools.cache
def _fbgemm_fp16() -> bool:
    """Whether this torch has FBGEMM's fp16-weight linear (x86 builds with AVX2 or better)."""
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return False
    try:
        w = torch.ops.quantized.linear_prepack_fp16(torch.ones(8, 8), None)
        return torch.ops.quantized.linear_dynamic_fp16(torch.ones(2, 8), w).shape == (2, 8)
    except (RuntimeError, AttributeError):
        return False


def can_half(w: torch.Tensor) -> bool:
    """Whether this torch can run `w` (fp32, on the CPU) as an FBGEMM fp16-packed weight."""
    return w.dtype == torch.float32 and w.device.type == "cpu" and _fbgemm_fp16()


def half_applies(half: bool, w: torch.Tensor, bias=None) -> bool:
    """The one gate for a product on `w`'s fp16-packed copy (target linears, draft linears, draft head): the plan
    says so, no bias, no gradient wanted (the packed copy carries none), and this torch can pack `w`."""
    return half and bias is None and not torch.is_grad_enabled() and can_half(w)


_PACKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # nn.Linear -> {m: (weight version, packed)}
# owner (an nn.Linear; a draft, for its head) -> (weight version, fp16 packed)
_HALF: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _remade(store, key, version, make) -> torch.Tensor:
    """store[key]'s tensor, made by `make()` on first use and again when `version` (the weight's) changed."""
    got = store.get(key)
    if got is None or got[0] != version:
        with torch.no_grad():
            got = store[key] = (version, make())
    return got[1]


def packed_weight(mod, m: int) -> torch.Tensor:
    """`mod.weight` reordered by MKL for m-row products."""
    w = mod.weight.detach()
    version = (w._version, w.data_ptr())
    return _remade(_PACKED.setdefault(mod, {}), m, version, lambda: torch.ops.mkl._mkl_reorder_linear_weight(w, m))


def half_weight(owner, w: torch.Tensor | None = None) -> torch.Tensor:
    """`w` (default `owner.weight`) rounded to fp16 and packed by FBGEMM, cached per owner."""
    w = (owner.weight if w is None else w).detach()
    version = (w._version, w.data_ptr(), tuple(w.shape))
    return _remade(_HALF, owner, version, lambda: torch.ops.quantized.linear_prepack_fp16(w, None))


def half_product(owner, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x @ w^T for x [..., in] on `half_weight(owner, w)`: fp16 weights, fp32 inputs and accumulation."""
    y = torch.ops.quantized.linear_dynamic_fp16(x.reshape(-1, x.shape[-1]), half_weight(owner, w))
    return y.view(*x.shape[:-1], y.shape[-1])


def _product(way: str, w: torch.Tensor, x: torch.Tensor, packed: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w^T computed `way` (WAYS, or "half" with `packed` FBGEMM's fp16 copy)."""
    if way == "transposed":
        return (w @ x.t()).t()
    if way == "packed":
        return torch.ops.mkl._mkl_linear(x, packed, w, None, x.shape[0])
    if way == "half":
        return torch.ops.quantized.linear_dynamic_fp16(x, packed)
    return F.linear(x, w)


def linear(mod, x: torch.Tensor, plan: GemmPlan = MODULE_PATH) -> torch.Tensor:
    """`mod(x)` for an nn.Linear and x [N, in], run the way `plan` says for its weight's shape and N rows
    (`GemmPlan`). A shape or row count outside the plan, a GPU or a bias keep the module's own path."""
    if half_applies(plan.half, mod.weight, mod.bias):
        return half_product(mod, mod.weight, x)
    rows = plan.shapes.get(tuple(mod.weight.shape)) if x.dim() == 2 and mod.bias is None else None
    how = rows.get(x.shape[0]) if rows is not None and x.device.type == "cpu" else None
    if how is None:
        return mod(x)
    n, (m, way) = x.shape[0], how
    if way == "packed" and not can_pack(mod.weight):  # a plan made for another torch or dtype
        way = "linear"
    if m > n:
        x = torch.cat([x, x[-1:].expand(m - n, -1)])
    y = _product(way, mod.weight, x, packed_weight(mod, m) if way == "packed" else None)
    return y[:n].contiguous() if m > n or way == "transposed" else y


PLAN_RULE = 5  # the version of measure_rows' choice, in the cache key: a plan chosen by another rule is measured again


class RowTable(NamedTuple):
    """`measure_rows`' answer for one weight shape."""

    table: dict  # n -> (m, way): the fp32 rows the plan takes
    why: str  # the timings, for the plan's record
    plan_s: list[float]  # per timed round: one forward of every row count as `table` runs it, in seconds
    half_s: list[float] | None  # the same with the fp16-packed weights (None: FBGEMM cannot run this weight)


def measure_rows(weights: list[torch.Tensor], rows=PLAN_ROWS, reps: int = 2, ways=(*WAYS, "half")) -> RowTable:
    """One shape's row table, timed over a model's `weights` of that shape: each m in `rows` each of `ways`,
    interleaved, `reps` rounds after a warm-up. For each n the cheapest fp32 (m >= n, way) is kept only when it
    beats the module's own path by 10% and in every round (a burst of other work must not pick a plan the
    quiet machine runs slower: the plan is cached). A shape packs for one m at most (a packed copy is about
    twice the weight): the one whose table costs least. "half" timings go to `measure_plan`, which decides."""
    rows = list(rows)
    half = "half" in ways and can_half(weights[0])
    ways = [w for w in ways if w in WAYS and (w != "packed" or can_pack(weights[0]))]
    timed = ways + (["half"] if half else [])
    halves = in_threads(lambda w: torch.ops.quantized.linear_prepack_fp16(w, None), weights) if half else []
    xs = {m: torch.randn(m, weights[0].shape[1], dtype=weights[0].dtype) for m in rows}
    rounds: dict[tuple[int, str], list[float]] = {(m, way): [] for m in rows for way in timed}
    with torch.inference_mode():
        for r in range(reps + 1):
            for m in rows:
                # one row count's packed copies at a time, made untimed (a copy per m would hold 6x the weights)
                packed = [torch.ops.mkl._mkl_reorder_linear_weight(w, m) for w in weights] if "packed" in ways else []
                for way in timed:
                    extra = halves if way == "half" else packed if way == "packed" else [None] * len(weights)
                    t0 = time.perf_counter()
                    for w, p in zip(weights, extra):
                        _product(way, w, xs[m], p).contiguous()
                    dt = time.perf_counter() - t0
                    if r:  # the first round warms up
                        rounds[(m, way)].append(dt)
                del packed
    del halves
    packs = rows if "packed" in ways else []
    best = {k: min(v) for k, v in rounds.items()}

    def choose(keys) -> dict:
        table = {}
        for n in rows:
            m, way = min((k for k in keys if k[0] >= n), key=best.get)
            own = rounds[(n, "linear")]
            if best[(m, way)] < 0.9 * best[(n, "linear")] and all(a < b for a, b in zip(rounds[(m, way)], own)):
                table[n] = (m, way)
        return table

    # no packed copy, or every packed row count on its own: the table whose row counts cost least in all (one
    # forward of each row count, as the table runs it)
    tables = [choose([k for k in rounds if k[1] in ways and (k[1] != "packed" or k[0] == p)]) for p in [None, *packs]]
    table = min(tables, key=lambda t: sum(best[t.get(n, (n, "linear"))] for n in rows))

    def per_round(keys: list) -> list[float]:
        return [sum(rounds[k][r] for k in keys) for r in range(reps)]

    ms = {k: round(v * 1e3, 1) for k, v in best.items()}
    o, i = weights[0].shape
    why = f"{o}x{i} x{len(weights)}, ms by rows ({' / '.join(timed)}): " + ", ".join(
        f"{m}: " + "/".join(str(ms[(m, w)]) for w in timed) for m in rows
    )
    half_s = per_round([(n, "half") for n in rows]) if "half" in timed else None
    return RowTable(table, why, per_round([table.get(n, (n, "linear")) for n in rows]), half_s)


def measure_plan(model) -> GemmPlan:
    """The `GemmPlan` of a model on this CPU from `measure_rows` per bias-free weight shape: first fp16 weights
    against fp32, taken when every shape can have them and they win by 10% in sum and in every round (~2 s for
    SmolLM2 on the EPYC); otherwise the fp32 row tables, every way (~11 s)."""
    by_shape: dict[tuple[int, int], list[torch.Tensor]] = {}
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear) and mod.bias is None and mod.weight.device.type == "cpu":
            by_shape.setdefault(tuple(mod.weight.shape), []).append(mod.weight)
    if by_shape and all(can_half(ws[0]) for ws in by_shape.values()):
        first = {shape: measure_rows(weights, ways=("linear", "half")) for shape, weights in by_shape.items()}
        plan_s = [sum(r) for r in zip(*(t.plan_s for t in first.values()))]
        half_s = [sum(r) for r in zip(*(t.half_s for t in first.values()))]
        half = min(half_s) < 0.9 * min(plan_s) and all(h < p for h, p in zip(half_s, plan_s))
        measured = (
            f"fp16 weights (FBGEMM) {min(half_s) * 1e3:.1f} ms vs fp32 {min(plan_s) * 1e3:.1f} ms over the row counts"
        )
        if half:
            return GemmPlan({}, "; ".join(t.why for t in first.values()), True, f"{measured}: taken")
        measured += ": not taken"
    else:
        measured = "fp16 weights: FBGEMM cannot run every shape"
    timings = {shape: measure_rows(weights, ways=WAYS) for shape, weights in by_shape.items()}
    why = "; ".join(t.why for t in timings.values())
    return GemmPlan({s: t.table for s, t in timings.items() if t.table}, why, False, measured)


_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its GemmPlan


def gemm_plan(model, wait_quiet_s: float = 0.0) -> GemmPlan:
    """`measure_plan` for the model, once per model in this process and cached in $KIT_CACHE_DIR/gemm-plan by CPU,
    torch, threads and weight shapes; a lock on the entry lets servers started together measure once.
    `wait_quiet_s`: how long to wait for a quiet machine before measuring (`_measure_if_quiet`)."""
    if model in _PLANS:
        return _PLANS[model]
    if next(model.parameters()).device.type != "cpu":
        _PLANS[model] = MODULE_PATH
        return MODULE_PATH
    ident = [
        PLAN_RULE,
        measurement_machine(),
        [[*m.weight.shape, str(m.weight.dtype)] for m in model.modules() if isinstance(m, torch.nn.Linear)],
    ]
    path = cache_dir() / "gemm-plan" / (hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:16] + ".json")

    def cached() -> GemmPlan | None:
        try:
            return GemmPlan.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    plan = cached()
    if plan is None:
        with cache_lock(path):  # a process waiting here is idle: the one measuring sees a quiet machine
            plan = cached()  # written by the process this one waited for
            if plan is None:
                plan = _measure_if_quiet(model, wait_quiet_s)
                if plan is not MODULE_PATH:
                    write_cache_json(path, plan.to_json())
    _PLANS[model] = plan
    return plan


def pack_for(model, plan: GemmPlan) -> None:
    """Make the packed weights `plan` uses now, not in a first forward. FBGEMM's fp16 packing runs on one core per
    weight and releases the GIL (~5 s for SmolLM2 on the EPYC), so weights are packed on torch's threads."""
    halves = []
    with torch.no_grad():  # the products run without gradients: half_applies judges them the same way here
        for mod in model.modules():
            if not isinstance(mod, torch.nn.Linear):
                continue
            if half_applies(plan.half, mod.weight, mod.bias):
                halves.append(mod)
            elif mod.bias is None and can_pack(mod.weight):
                for m in {m for m, way in plan.shapes.get(tuple(mod.weight.shape), {}).values() if way == "packed"}:
                    packed_weight(mod, m)
        in_threads(half_weight, halves)


def in_threads(fn, items: list) -> list:
    """[fn(x) for x in items] on torch's thread count of Python threads (ops that release the GIL)."""
    if len(items) < 2 or torch.get_num_threads() < 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(min(torch.get_num_threads(), len(items)), thread_name_prefix="kit-pack") as pool:
        return list(pool.map(fn, items))


def _measure_if_quiet(model, wait_quiet_s: float = 0.0) -> GemmPlan:
    """`measure_plan` when no other work holds half a core, before and after (it slows timings up to 100x,
    unevenly); else MODULE_PATH, not cached. A busy machine is polled for up to `wait_quiet_s` first."""
    deadline = time.monotonic() + wait_quiet_s
    while kit._other_work():
        if time.monotonic() >= deadline:
            return MODULE_PATH
        time.sleep(0.25)
    plan = measure_plan(model)
    return MODULE_PATH if kit._other_work() else plan


class SeqKV:
    """One sequence's target KV cache, [layers, 2 (k, v), kv heads, capacity, head dim], grown by doubling."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype, device, capacity: int):
        self.buf = torch.empty(layers, 2, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.len = 0

    def reserve(self, n: int) -> None:
        cap = self.buf.shape[3]
        if n <= cap:
            return
        while cap < n:
            cap *= 2
        new = self.buf.new_empty(*self.buf.shape[:3], cap, self.buf.shape[4])
        new[:, :, :, : self.len] = self.buf[:, :, :, : self.len]
        self.buf = new

    def keep(self, start: int, offsets: list[int]) -> None:
        """After a verify that wrote entries start.., keep start+offsets (ascending) as start, start+1, ..."""
        if offsets != list(range(len(offsets))):
            idx = torch.tensor([start + o for o in offsets], device=self.buf.device)
            self.buf[:, :, :, start : start + len(offsets)] = self.buf.index_select(3, idx)
        self.len = start + len(offsets)


@dataclass(eq=False)
class Piece:
    """One sequence's new tokens in a batched forward."""

    kv: SeqKV
    ids: list[int]
    parents: list[int] | None = None  # a draft tree: node j sees the prefix and its ancestors (tree_layout)
    logits: str = "all"  # "all": argmax at every new token; "last": at the last one only (a prefill)


class RaggedTarget:
    """A Llama-layout HF target run over many sequences at once, each with its own KV cache.

    All new tokens form one [N, hidden] batch, so each weight is read once per step (what makes batching pay on
    a bandwidth-bound CPU); attention runs per sequence, causal or with a tree mask. The model's own modules
    compute norms, rotary tables and MLPs; capture points are read off the residual stream (points None: the
    final post-norm state)."""

    def __init__(self, model, points: list[int] | None, plan: GemmPlan | None = None):
        cfg = model.config.get_text_config()
        if cfg.model_type not in LAYOUT_TYPES:
            raise KitInputError(
                f"target model_type {cfg.model_type!r}: the reference engine runs Llama-layout targets ({', '.join(LAYOUT_TYPES)})"
            )
        self.model, self.dec = model, decoder_of(model)
        self.layers = list(self.dec.layers)
        L = len(self.layers)
        for p in points or []:
            if not 0 <= p <= L:
                raise KitInputError(f"capture point {p} outside 0..{L} for a {L}-layer target")
        self.points = points
        self.nh, self.nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nh
        self.scale = self.layers[0].self_attn.scaling
        w = next(model.parameters())
        self.dtype, self.device = w.dtype, w.device
        # plan None: measured on this CPU; MODULE_PATH keeps the module's own fp32 products on every machine
        self.plan = gemm_plan(model) if plan is None else plan
        pack_for(model, self.plan)

    def new_kv(self, capacity: int) -> SeqKV:
        return SeqKV(len(self.layers), self.nkv, self.hd, self.dtype, self.device, max(64, capacity))

    def qkv(self, layer, x: torch.Tensor, cos, sin):
        """A decoder layer's q [1, heads, N, hd] and rotated k, v [1, kv heads, N, hd] for x [N, H]."""
        at, n = layer.self_attn, x.shape[0]
        h = layer.input_layernorm(x)
        projs = (at.q_proj, at.k_proj, at.v_proj)
        q, k, v = (linear(p, h, self.plan).view(n, -1, self.hd).transpose(0, 1)[None] for p in projs)
        if getattr(at, "q_norm", None) is not None:  # qwen3
            q, k = at.q_norm(q), at.k_norm(k)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return q, k, v

    def finish(self, layer, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """The residual stream after a decoder layer, from its input x and attention output [N, heads * hd]."""
        t = self.plan
        x = x + linear(layer.self_attn.o_proj, attn, t)
        h, mlp = layer.post_attention_layernorm(x), layer.mlp
        if not all(hasattr(mlp, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            return x + mlp(h)
        return x + linear(mlp.down_proj, mlp.act_fn(linear(mlp.gate_proj, h, t)) * linear(mlp.up_proj, h, t), t)

    @torch.inference_mode()
    def forward(self, pieces: list[Piece]) -> list[tuple[list[int], torch.Tensor]]:
        """One forward over every piece's new tokens, appended to its cache: per piece (argmax ids, features [T, W])."""
        dev, n = self.device, 0
        ids, pos, spans, masks = [], [], [], []
        for pc in pieces:
            P, T = pc.kv.len, len(pc.ids)
            pc.kv.reserve(P + T)
            ids += pc.ids
            if pc.parents is not None:
                depth, vis = tree_layout(pc.parents, P)
                pos += [P + d for d in depth]
                masks.append(vis.to(dev))
            else:
                pos += range(P, P + T)
                # one token sees everything; a fresh prefill is plain causal; tokens after a prefix need a mask
                masks.append(torch.ones(T, P + T, dtype=torch.bool, device=dev).tril(P) if T > 1 and P > 0 else None)
            spans.append((n, n + T, P))
            n += T
        x = self.dec.embed_tokens(torch.tensor(ids, device=dev))  # [N, H]
        cos, sin = self.dec.rotary_emb(x[None], torch.tensor([pos], device=dev))
        want = set(self.points or ())
        store = {0: x} if 0 in want else {}
        rep = self.nh // self.nkv
        for li, layer in enumerate(self.layers):
            q, k, v = self.qkv(layer, x, cos, sin)
            outs = []
            for (a, b, P), pc, m in zip(spans, pieces, masks):
                T = b - a
                kb = pc.kv.buf[li]
                kb[0, :, P : P + T] = k[0, :, a:b]
                kb[1, :, P : P + T] = v[0, :, a:b]
                K, V = kb[0, :, : P + T][None], kb[1, :, : P + T][None]
                # grouped heads read their shared K/V in place: the same result as HF's repeat_kv copies, bit for
                # bit, without two copies of the cache per layer (~40 us each on a 2-core EPYC)
                o = F.scaled_dot_product_attention(
                    q[:, :, a:b], K, V, attn_mask=m, scale=self.scale, is_causal=m is None and T > 1, enable_gqa=rep > 1
                )
                outs.append(o[0].transpose(0, 1).reshape(T, self.nh * self.hd))
            x = self.finish(layer, x, outs[0] if len(outs) == 1 else torch.cat(outs, 0))
            if li + 1 in want:
                store[li + 1] = x
        normed = self.dec.norm(x)
        rows = []
        for (a, b, _), pc in zip(spans, pieces):
            rows += range(a, b) if pc.logits == "all" else [b - 1]
        head_in = normed if len(rows) == n else normed[torch.tensor(rows, device=dev)]
        am = linear(self.model.lm_head, head_in, self.plan).argmax(-1).tolist()
        feats = torch.cat([store[p] for p in self.points], -1) if self.points else normed
        out, r = [], 0
        for (a, b, P), pc in zip(spans, pieces):
            pc.kv.len = P + b - a
            c = b - a if pc.logits == "all" else 1
            out.append((am[r : r + c], feats[a:b]))
            r += c
        return out


def batch_continue(
    model,
    rows: list[list[int]],
    max_new_tokens: int,
    pad_id: int,
    eos_token_id: int | None,
    batch: int = 16,
    temperature: float = 0.0,
) -> tuple[list[list[int]], list[list[int]]]:
    """Continuations of many prompts (left-padded HF generate) and the target's greedy token at each step.

    temperature > 0 samples from softmax(logits / temperature) (no top-k/top-p) while a hook on the head records
    each step's argmax: the greedy pick after the prompt and the sampled tokens so far. Both stop after an EOS."""
    conts, greedy = [], []
    dev = next(model.parameters()).device
    sample = temperature > 0
    steps: list[torch.Tensor] = []
    head = model.get_output_embeddings()
    hook = head.register_forward_hook(lambda _m, _i, out: steps.append(out[:, -1].argmax(-1))) if sample else None
    how = {"max_new_tokens": max_new_tokens, "pad_token_id": pad_id, "eos_token_id": eos_token_id, "do_sample": sample}
    how |= {"temperature": temperature, "top_k": 0, "top_p": 1.0} if sample else {}
    try:
        for b0 in range(0, len(rows), batch):
            chunk = rows[b0 : b0 + batch]
            W = max(map(len, chunk))
            ids = torch.tensor([[pad_id] * (W - len(r)) + list(r) for r in chunk], device=dev)
            att = (torch.arange(W)[None] >= torch.tensor([W - len(r) for r in chunk])[:, None]).long().to(dev)
            steps.clear()
            g = model.generate(input_ids=ids, attention_mask=att, **how)
            new = g[:, W:].tolist()
            picks = torch.stack(steps, 1).tolist() if sample else new
            for row, pick in zip(new, picks):
                if eos_token_id is not None and eos_token_id in row:
                    row = row[: row.index(eos_token_id) + 1]
                conts.append(row)
                greedy.append(pick[: len(row)])
    finally:
        if hook is not None:
            hook.remove()
    return conts, greedy
