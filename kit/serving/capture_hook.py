"""The server capture's recorder: installed as `sitecustomize.py` on SGLang's PYTHONPATH, it copies target states.

`kit launch --capture-hidden DIR` (kit.measure.capture) puts this file, as `sitecustomize.py`, first on the
PYTHONPATH of one SGLang launch and sets `KIT_CAPTURE_DIR`. Python imports `sitecustomize` in every interpreter
of that server (the scheduler processes are spawned with the parent's environment); this file then installs an
import hook that wraps `ModelRunner.load_model` as its module loads (SGLang's files stay untouched). After the
*target* model is built (not a draft worker's), on TP rank 0 only, it registers torch hooks on the decoder:

* a forward pre-hook on `layers[p]` for each capture point p < L: the residual stream entering layer p. Where
  the layer takes the residual as an argument (srt/models/llama.py, deepseek_v2.py of the bundled release),
  SGLang's own aux expression `hidden_states + residual` (at layer 0 the residual is None and the embedding alone
  enters). Where the residual stream lives in the forward batch and the layer takes an aux-capture argument
  instead (releases with srt/layers/layer_boundary/: llama.py's `capture_output`, a callable; deepseek_v2.py's
  `captured_last_layer_outputs`, a collector), the hook passes the recorder's own there (wrapping SGLang's when
  an EAGLE-3 launch set one), and the layer hands it the state exactly as it hands an EAGLE-3 draft's capture
  (`capture_style` reads which, per layer);
* a forward pre-hook on the final `norm` for p = L (its two inputs summed: the pre-norm last state) and a forward
  hook on it: the post-norm final state (`output[0]` when the norm returns (normed, residual));
* from the first layer's arguments, the batch's `forward_batch.input_ids` and `forward_mode` (extend: a new
  request's prompt, requests being sent one at a time; decode: one token, the one sampled last).

Recording starts when the kit creates `armed` in KIT_CAPTURE_DIR (after the server is ready: a startup's dummy
forwards are not the user's requests). Per forward the tensors stay on the GPU in a buffer (no copy, no sync in
the hot path); the buffer goes to one `chunk_<n>.pt` file (torch.save) at the next extend or every
FLUSH_FORWARDS forwards, then one JSON line in `index.jsonl` names the file and its forwards (mode, tokens).
`KIT_CAPTURE_MAX_TOKENS` bounds the tokens recorded.
The kit side (`kit.measure.capture.assemble`) turns the chunks into the capture folder of
`kit.reference.captured` and removes them.

Environment: KIT_CAPTURE_DIR (chunks and index; unset: this file does nothing), KIT_CAPTURE_POINTS ("3,16,27"),
KIT_CAPTURE_MAX_TOKENS (default unbounded). Written against the source of the release the kit bundles
(`kit.sglang.bundle`): srt/model_executor/model_runner.py (`ModelRunner.load_model`, `is_draft_worker`,
`ps.tp_rank`), srt/models/llama.py and deepseek_v2.py (decoder layers called as
`layer(positions, hidden_states, forward_batch, residual, ...)`, then `norm(hidden, residual)`), and the
layer_boundary releases' (`layer(positions, hidden_states, forward_batch, capture_output=...)`, srt/layers/layer_boundary/stage.py calling
`capture(value, owned=...)`; the final norm still `norm(hidden, residual)`).
Standard library only at import (torch is imported inside the hooks, in SGLang's process where it is loaded; the
import hook is `kit.serving.after_import`, copied beside this file as `kit_after_import.py`);
every hook is fail-safe: a failure is an `error` line in the index and SGLang runs on unobserved.

    KIT_CAPTURE_DIR=/tmp/cap KIT_CAPTURE_POINTS=3,16,27 PYTHONPATH=DIR_WITH_THIS_AS_sitecustomize \
        python -m sglang.launch_server --disable-radix-cache ...
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time

if __package__:  # imported as kit.serving.capture_hook
    from kit.serving import after_import
else:  # copied as sitecustomize.py, with kit.serving.after_import beside it as kit_after_import.py
    import kit_after_import as after_import

CAPTURE_ENV = "KIT_CAPTURE_DIR"
POINTS_ENV = "KIT_CAPTURE_POINTS"
BUDGET_ENV = "KIT_CAPTURE_MAX_TOKENS"
INDEX = "index.jsonl"
ARMED = "armed"  # the kit creates this file once the server is ready: startup's own forwards are never recorded
FLUSH_FORWARDS = 64
RUNNER_MODULE = "sglang.srt.model_executor.model_runner"
# where a target class keeps its decoder (`layers` + `norm`): Llama-style, and multimodal wrappers (Kimi-K2.5)
DECODER_PATHS = ("model", "language_model.model", "model.language_model", "language_model")
_lock = threading.Lock()


def note(out: str, kind: str, **data) -> None:
    """Append one JSON line to the index (chunks, errors, the attach and the budget)."""
    line = json.dumps({"kind": kind, "pid": os.getpid(), "t": time.time(), **data}, default=repr)
    with _lock, open(os.path.join(out, INDEX), "a") as f:
        f.write(line + "\n")


def find_decoder(model):
    """The module holding the decoder layers and the final norm, and its path; (None, None) when none is found."""
    for path in DECODER_PATHS:
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is not None and hasattr(obj, "layers") and hasattr(obj, "norm"):
            return obj, path
    return None, None


class Recorder:
    """Hooks on one decoder; buffers each forward's states and writes them in chunks under `out`."""

    def __init__(self, out: str, points: list[int], max_tokens: int | None = None, rank: int = 0):
        self.out, self.points, self.max_tokens, self.rank = out, list(points), max_tokens, rank
        self.tokens = 0
        self.chunks = 0
        self.buffer: list[dict] = []
        self.current: dict | None = None
        self.full = False
        self.handles: list = []
        self.L = 0
        self.armed = False

    # -- hooks --------------------------------------------------------------------------------------------
    def attach(self, decoder) -> None:
        layers = decoder.layers
        L = self.L = len(layers)
        bad = [p for p in self.points if not 0 <= p <= L]
        if bad:
            raise ValueError(f"capture points {bad} outside 0..{L}")
        self.handles.append(layers[0].register_forward_pre_hook(self._start, with_kwargs=True))
        for p in sorted(set(self.points)):
            if p < L:
                style = capture_style(layers[p])
                take = self._point if style == "residual" else functools.partial(self._tap, style)
                self.handles.append(layers[p].register_forward_pre_hook(functools.partial(take, p), with_kwargs=True))
        if L in self.points:
            self.handles.append(decoder.norm.register_forward_pre_hook(self._pre_norm, with_kwargs=True))
        self.handles.append(decoder.norm.register_forward_hook(self._final))

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []

    def _guard(self, fn, *a):
        try:
            return fn(*a)
        except Exception as e:  # noqa: BLE001 — recording must never break the server
            self.current = None
            note(self.out, "error", where=fn.__name__, error=f"{type(e).__name__}: {e}")

    def _start(self, module, args, kwargs):
        self._guard(self._begin, args, kwargs)

    def _begin(self, args, kwargs) -> None:
        fb = args[2] if len(args) > 2 else kwargs.get("forward_batch")
        ids = getattr(fb, "input_ids", None)
        mode = getattr(fb, "forward_mode", None)
        n = 0 if ids is None else int(ids.shape[0])
        self.current = None
        if n == 0 or self.full:
            return
        if not self.armed:  # one stat per forward until the kit says the server is ready
            if not os.path.exists(os.path.join(self.out, ARMED)):
                return
            self.armed = True
        is_extend = getattr(mode, "is_extend", None)
        extend = bool(is_extend()) if callable(is_extend) else False
        if extend and self.buffer:
            self.flush()  # a new request: the previous one's forwards go to disk now
        if self.max_tokens is not None and self.tokens + n > self.max_tokens:
            self.full = True
            self.flush()
            note(self.out, "budget", tokens=self.tokens, max_tokens=self.max_tokens)
            return
        self.current = {
            "mode": getattr(mode, "name", str(mode)),
            "extend": extend,
            "ids": ids.detach().clone(),
            "points": {},
        }

    def _point(self, p, module, args, kwargs):
        if self.current is not None:
            self._guard(self._take_point, p, args, kwargs)

    def _take_point(self, p, args, kwargs) -> None:
        hidden = args[1] if len(args) > 1 else kwargs["hidden_states"]
        residual = args[3] if len(args) > 3 else kwargs.get("residual")
        # SGLang's aux state: hidden + residual (a new tensor); layer 0 gets the embedding, which the fused
        # norms later update in place as the residual, so it is copied
        self.current["points"][p] = hidden.detach().clone() if residual is None else (hidden + residual).detach()

    def _tap(self, style, p, module, args, kwargs):
        """Pass the layer the recorder's own aux capture (around SGLang's, if any) for this forward."""
        if self.current is None:
            return None
        if style not in kwargs and len(args) > 3:
            self._guard(_positional, style)
            return None
        given = kwargs.get(style)
        tap = Tap(self, p, given)
        return args, {**kwargs, style: tap if style == "captured_last_layer_outputs" else tap.capture}

    def took(self, p, hidden) -> None:
        """A state SGLang handed the recorder's capture (borrowed storage: copied)."""
        if self.current is not None:
            self.current["points"][p] = hidden.detach().clone()

    def _pre_norm(self, module, args, kwargs):
        if self.current is not None:
            self._guard(self._take_pre_norm, args, kwargs)

    def _take_pre_norm(self, args, kwargs) -> None:
        hidden = args[0]
        residual = args[1] if len(args) > 1 else kwargs.get("residual")
        self.current["points"][self.L] = hidden.detach().clone() if residual is None else (hidden + residual).detach()

    def _final(self, module, args, output):
        if self.current is not None:
            self._guard(self._end, output)

    def _end(self, output) -> None:
        import torch

        cur, self.current = self.current, None
        missing = [p for p in self.points if p not in cur["points"]]
        if missing:
            raise RuntimeError(f"points {missing} were not handed over in this forward")
        final = output[0] if isinstance(output, (tuple, list)) else output
        aux = torch.cat([cur["points"][p] for p in self.points], -1) if self.points else None
        self.buffer.append({"mode": cur["mode"], "ids": cur["ids"], "aux": aux, "final": final.detach().clone()})
        self.tokens += int(cur["ids"].shape[0])
        if len(self.buffer) >= FLUSH_FORWARDS:
            self.flush()

    def flush(self) -> None:
        """Write the buffered forwards as one chunk file, then its index line (a file is indexed once whole)."""
        if not self.buffer:
            return
        import torch

        buf, self.buffer = self.buffer, []
        name = f"chunk_{self.chunks:06d}.pt"
        self.chunks += 1
        data = [{k: (v.cpu() if hasattr(v, "cpu") else v) for k, v in f.items()} for f in buf]
        tmp = os.path.join(self.out, name + ".tmp")
        torch.save(data, tmp)
        os.replace(tmp, os.path.join(self.out, name))
        note(
            self.out, "chunk", file=name, forwards=[{"mode": f["mode"], "tokens": int(f["ids"].shape[0])} for f in buf]
        )


def capture_style(layer) -> str:
    """How SGLang's decoder layer gets the stream entering it: `residual` (an argument beside hidden_states),
    else the name of the layer's aux-capture argument the recorder fills (`capture_output`: a callable
    `capture(value, owned=...)`; `captured_last_layer_outputs`: a collector with `.capture`)."""
    import inspect

    params = inspect.signature(layer.forward).parameters
    for style in ("residual", "capture_output", "captured_last_layer_outputs"):
        if style in params:
            return style
    raise ValueError(f"{type(layer).__name__}.forward takes neither a residual nor an aux-capture argument")


def _positional(style: str) -> None:
    raise TypeError(f"the layer got {style} by position: the recorder passes it by name only")


class Tap:
    """The recorder's aux capture for one layer and forward: records the state SGLang hands over, then passes it
    to SGLang's own capture when the launch set one (an EAGLE-3 launch's), so both see the same value."""

    def __init__(self, rec: Recorder, p: int, given):
        self.rec, self.p, self.given = rec, p, given

    def capture(self, hidden, *, owned: bool = False) -> None:
        self.rec._guard(self.rec.took, self.p, hidden)
        if callable(self.given) and not hasattr(self.given, "capture"):
            self.given(hidden, owned=owned)
        elif self.given is not None:
            self.given.capture(hidden, owned=owned)

    def append(self, hidden) -> None:
        self.rec._guard(self.rec.took, self.p, hidden)
        if self.given is not None:
            self.given.append(hidden)

    def __len__(self) -> int:
        return len(self.given) if self.given is not None else 0

    def __getattr__(self, name):  # the rest of SGLang's collector (finalize, slot, ...), when there is one
        if self.given is None:
            raise AttributeError(name)
        return getattr(self.given, name)


def attach_to(runner, out: str, points: list[int], max_tokens: int | None) -> Recorder | None:
    """Hooks on a ModelRunner's model when it is the target on TP rank 0 (and the first PP stage holds it all)."""
    if getattr(runner, "is_draft_worker", False):
        return None
    ps = getattr(runner, "ps", None)
    rank = getattr(ps, "tp_rank", getattr(runner, "tp_rank", 0)) or 0
    pp = getattr(ps, "pp_size", getattr(runner, "pp_size", 1)) or 1
    if int(rank) != 0:
        return None
    if int(pp) > 1:
        note(out, "error", where="attach", error=f"pipeline parallel size {pp}: one stage holds only some layers")
        return None
    model = getattr(runner, "model", None)
    decoder, path = find_decoder(model)
    if decoder is None:
        note(out, "error", where="attach", error=f"{type(model).__name__}: no decoder with layers and norm")
        return None
    rec = Recorder(out, points, max_tokens, int(rank))
    rec.attach(decoder)
    note(out, "attached", model=type(model).__name__, decoder=path, layers=len(decoder.layers), points=points)
    return rec


def config_from_env() -> tuple[str, list[int], int | None] | None:
    out = os.environ.get(CAPTURE_ENV)
    if not out:
        return None
    points = [int(x) for x in os.environ.get(POINTS_ENV, "").split(",") if x.strip()]
    budget = os.environ.get(BUDGET_ENV)
    return out, points, int(budget) if budget else None


RECORDERS: list[Recorder] = []


def wrap_load_model(cls) -> None:
    """After `ModelRunner.load_model` builds a model: the recorder on it (when it is the target, TP rank 0)."""
    orig = cls.__dict__.get("load_model")
    if orig is None or getattr(orig, "_kit_wrapped", False):
        return

    @functools.wraps(orig)
    def load_model(self, *a, **k):
        result = orig(self, *a, **k)
        conf = config_from_env()
        if conf is not None:
            try:
                rec = attach_to(self, *conf)
                if rec is not None:
                    RECORDERS.append(rec)
            except Exception as e:  # noqa: BLE001 — recording must never break the server
                note(conf[0], "error", where="load_model", error=f"{type(e).__name__}: {e}")
        return result

    load_model._kit_wrapped = True
    cls.load_model = load_model


TAG = "kit.capture"


def _after(module) -> None:
    cls = getattr(module, "ModelRunner", None)
    if cls is not None:
        wrap_load_model(cls)


def install() -> None:
    conf = config_from_env()
    if conf is None or after_import.installed(TAG):
        return
    os.makedirs(conf[0], exist_ok=True)
    after_import.install(TAG, lambda fullname: fullname == RUNNER_MODULE, _after)


def chain_next_sitecustomize() -> None:
    """Run the sitecustomize.py this one shadows (a distribution's or an environment's), as Python would have."""
    try:
        after_import.chain_next_sitecustomize(__file__)
    except Exception:  # noqa: BLE001 — another sitecustomize failing is not the capture's to raise
        pass


install()
if __name__ == "sitecustomize":
    chain_next_sitecustomize()
