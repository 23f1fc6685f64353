"""The rehearsal's recorder: installed as `sitecustomize.py` on SGLang's PYTHONPATH, it observes, never changes.

Python imports `sitecustomize` at startup of every interpreter whose path holds it, SGLang's scheduler and
detokenizer processes included (they are spawned with the parent's environment). This file installs an
import hook that wraps a few SGLang functions as their modules load (SGLang's files stay untouched) and
appends one JSON line per observation to `$KIT_REHEARSAL_RECORD`:

* `server_args`   the resolved ServerArgs (speculative algorithm, steps, topk, draft tokens, load formats, TP,
                  dtype, quantization) after `ServerArgs.__post_init__`;
* `model_config`  each ModelConfig built (target and draft): path, is_draft_model, dtype, quantization;
* `load_weights`  for each EAGLE-3 draft class's `load_weights`: the checkpoint names the loader was given,
                  the ones it never handed to a weight loader (`skipped`; `d2t`/`t2d` are read specially), and
                  the parameters no weight loader filled (`unfilled`), and the class of the quant config the
                  loader built the draft with (`quant_config`, None: unquantized);
* `capture`       each target `set_eagle3_layers_to_capture(layer_ids)`: the ids and the `layers_to_capture` /
                  `_is_layer_to_capture` marks it left;
* `draft_input`   the width of the hidden states reaching the draft model (3 x H goes through `fc`, H bypasses
                  it) and the batch's forward mode, first few forwards of each kind (decode steps carry the
                  draft's own H-wide state; the target's states enter on draft extend);
* `exception`     a scheduler's exception traceback (SGLang catches it and logs it; we copy it).

Written against the source of the release the kit bundles (`kit.sglang.bundle`): srt/server_args.py,
srt/configs/model_config.py, srt/models/llama_eagle3.py, srt/models/kimi_k25_eagle3.py,
srt/managers/scheduler.py. Every wrapper is fail-safe: a hook that does not find what it expects records
`hook_error` and lets SGLang run unobserved. Standard library only (it runs before
anything else in SGLang's interpreter; the kit need not be importable there): its import hook is
`kit.serving.after_import`, copied beside it as `kit_after_import.py` (`install_as_sitecustomize`).

    KIT_REHEARSAL_RECORD=/tmp/rec.jsonl PYTHONPATH=DIR_WITH_THIS_AS_sitecustomize python -m sglang.launch_server ...
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
import time

if __package__:  # imported as kit.rehearsal.hooks
    from kit.serving import after_import
else:  # copied as sitecustomize.py, with kit.serving.after_import beside it as kit_after_import.py
    import kit_after_import as after_import

RECORD_ENV = "KIT_REHEARSAL_RECORD"
DRAFT_MODULES = ("sglang.srt.models.llama_eagle3", "sglang.srt.models.kimi_k25_eagle3")
SERVER_ARGS_FIELDS = tuple(
    "speculative_algorithm speculative_num_steps speculative_eagle_topk speculative_num_draft_tokens "
    "speculative_draft_model_path speculative_draft_load_format speculative_draft_model_quantization load_format "
    "tp_size dp_size ep_size dtype quantization kv_cache_dtype context_length mem_fraction_static "
    "attention_backend".split()
)
MAX_DRAFT_INPUTS = 4
_lock = threading.Lock()
_seen: dict[tuple[str, bool | None], int] = {}


def record(kind: str, **data) -> None:
    """Append one observation (a JSON line) to the record file; silent when no file is set."""
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    line = json.dumps({"kind": kind, "pid": os.getpid(), "t": time.time(), **data}, default=repr)
    with _lock, open(path, "a") as f:
        f.write(line + "\n")


def _safe(kind: str):
    """Run an observer; any failure of ours becomes a `hook_error` line, never SGLang's problem."""

    def deco(fn):
        @functools.wraps(fn)
        def inner(*a, **k):
            try:
                return fn(*a, **k)
            except Exception as e:  # noqa: BLE001 — observing must never break the server
                record("hook_error", hook=kind, error=f"{type(e).__name__}: {e}")

        return inner

    return deco


# -- observers --------------------------------------------------------------------------------------------
@_safe("server_args")
def observe_server_args(args) -> None:
    record("server_args", **{f: getattr(args, f, None) for f in SERVER_ARGS_FIELDS if hasattr(args, f)})


@_safe("model_config")
def observe_model_config(cfg) -> None:
    hf = getattr(cfg, "hf_config", None)
    record(
        "model_config",
        model_path=getattr(cfg, "model_path", None),
        is_draft_model=getattr(cfg, "is_draft_model", None),
        dtype=str(getattr(cfg, "dtype", None)),
        quantization=getattr(cfg, "quantization", None),
        architectures=list(getattr(hf, "architectures", None) or []),
        hidden_size=getattr(cfg, "hidden_size", None),
    )


def _layers_state(model) -> dict:
    """layers_to_capture / marks on the decoder model(s) a target's setter reaches."""
    out = {}
    for path in ("model", "language_model.model", "language_model"):
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is None:
            continue
        if hasattr(obj, "layers_to_capture"):
            out.setdefault("layers_to_capture", list(obj.layers_to_capture or []))
            out.setdefault("holder", f"{path} ({type(obj).__name__})")
        layers = getattr(obj, "layers", None)
        if layers is not None:
            try:
                marks = [i for i, layer in enumerate(layers) if getattr(layer, "_is_layer_to_capture", False)]
            except TypeError:
                marks = []
            out.setdefault("marked", marks)
    return out


def wrap_capture(cls) -> None:
    """Record each `set_eagle3_layers_to_capture` call on a target class (after it ran)."""
    orig = cls.__dict__.get("set_eagle3_layers_to_capture")
    if orig is None or getattr(orig, "_kit_wrapped", False):
        return

    @functools.wraps(orig)
    def setter(self, *a, **k):
        out = orig(self, *a, **k)
        _after_capture(self, a[0] if a else k.get("layer_ids"))
        return out

    setter._kit_wrapped = True
    cls.set_eagle3_layers_to_capture = setter


@_safe("capture")
def _after_capture(model, layer_ids) -> None:
    record(
        "capture",
        target_class=type(model).__name__,
        layer_ids=list(layer_ids) if layer_ids is not None else None,
        capture_aux_hidden_states=getattr(model, "capture_aux_hidden_states", None),
        **_layers_state(model),
    )


def wrap_load_weights(cls, module) -> None:
    """Record what a draft class's `load_weights` was given, skipped and never filled."""
    orig = cls.__dict__.get("load_weights")
    if orig is None or getattr(orig, "_kit_wrapped", False):
        return

    @functools.wraps(orig)
    def load_weights(self, weights):
        import torch

        given: list[tuple[str, object]] = []  # strong references: ids stay unique while we compare them
        consumed: set[int] = set()
        filled: set[str] = set()
        derived: dict[int, tuple] = {}  # id(fused tensor) -> (fused tensor, ids of the tensors it was made of)
        restore = _instrument_loaders(self, module, consumed, filled, derived)
        cat = torch.cat

        def tracking_cat(tensors, *a, **k):  # the MLA loader fuses q_a_proj + kv_a_proj_with_mqa with torch.cat
            out = cat(tensors, *a, **k)
            derived[id(out)] = (out, tuple(id(t) for t in tensors))
            return out

        def tap():
            for name, tensor in weights:
                given.append((name, tensor))
                yield name, tensor

        torch.cat = tracking_cat
        try:
            return orig(self, tap())
        finally:
            torch.cat = cat
            restore()
            _after_load(self, [(n, id(t)) for n, t in given], consumed, filled)

    load_weights._kit_wrapped = True
    cls.load_weights = load_weights


def _instrument_loaders(model, module, consumed: set, filled: set, derived: dict):
    """Wrap every parameter's weight_loader and the module's default_weight_loader to note what they load."""
    undo = []

    def consume(t) -> None:
        consumed.add(id(t))
        consumed.update(derived.get(id(t), (None, ()))[1])

    def note(name, fn):
        @functools.wraps(fn)
        def loader(param, loaded_weight, *a, **k):
            consume(loaded_weight)
            filled.add(name)
            return fn(param, loaded_weight, *a, **k)

        return loader

    for name, p in model.named_parameters():
        wl = getattr(p, "weight_loader", None)
        if wl is None:
            continue
        for attr in ("weight_loader", "_weight_loader"):
            try:
                setattr(p, attr, note(name, getattr(p, attr)))
                undo.append((p, attr, wl))
                break
            except (AttributeError, TypeError):
                continue
    default = getattr(module, "default_weight_loader", None)
    if default is not None:
        names = {id(p): n for n, p in model.named_parameters()}

        @functools.wraps(default)
        def default_loader(param, loaded_weight, *a, **k):
            consume(loaded_weight)
            filled.add(names.get(id(param), "?"))
            return default(param, loaded_weight, *a, **k)

        module.default_weight_loader = default_loader

    def restore():
        for p, attr, wl in undo:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(p, attr, wl)
        if default is not None:
            module.default_weight_loader = default

    return restore


@_safe("load_weights")
def _after_load(model, given, consumed, filled) -> None:
    names = [n for n, _ in given]
    special = [n for n in names if n.split(".")[-1] in ("d2t", "t2d")]
    skipped = [n for n, i in given if i not in consumed and n not in special]
    params = [n for n, _ in model.named_parameters()]
    record(
        "load_weights",
        draft_class=type(model).__name__,
        given=names,
        skipped=skipped,
        unfilled=[n for n in params if n not in filled],
        params=params,
        hot_token_id=hasattr(model, "hot_token_id"),
        # the quant config the loader built the draft with (None: unquantized, whatever ModelConfig.quantization says)
        **({"quant_config": _class_name(model.quant_config)} if hasattr(model, "quant_config") else {}),
    )


def _class_name(obj) -> str | None:
    return None if obj is None else type(obj).__name__


def wrap_draft_forward(cls) -> None:
    """Record the width of the hidden states the target hands the draft model (before fc)."""
    orig = cls.__dict__.get("forward")
    if orig is None or getattr(orig, "_kit_wrapped", False):
        return

    @functools.wraps(orig)
    def forward(self, *a, **k):
        _draft_input(self, a, k)
        return orig(self, *a, **k)

    forward._kit_wrapped = True
    cls.forward = forward


@_safe("draft_input")
def _draft_input(model, a, k) -> None:
    fb = k.get("forward_batch") or next((x for x in a if hasattr(x, "spec_info")), None)
    hs = getattr(getattr(fb, "spec_info", None), "hidden_states", None)
    if hs is None or not hasattr(hs, "shape"):
        return
    # A draft decode step carries the draft's own recurrent state (H wide, by design); the target's states
    # enter on the other modes (draft extend). Each kind gets its own quota, so the decode CUDA graphs
    # captured at startup cannot use up the records before a draft extend runs.
    mode = getattr(fb, "forward_mode", None)
    is_decode = getattr(mode, "is_decode", None)
    decode = bool(is_decode()) if callable(is_decode) else None
    key = (type(model).__name__, decode)
    if _seen.get(key, 0) >= MAX_DRAFT_INPUTS:
        return
    _seen[key] = _seen.get(key, 0) + 1
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    capturing = getattr(cuda, "is_current_stream_capturing", None)
    fc = getattr(model, "fc", None)
    record(
        "draft_input",
        draft_model=key[0],
        mode=getattr(mode, "name", None if mode is None else str(mode)),
        decode=decode,
        capturing=bool(capturing()) if callable(capturing) and cuda.is_available() else False,
        width=int(hs.shape[-1]),
        draft_hidden=getattr(getattr(model, "config", None), "hidden_size", None),
        fc_in=getattr(fc, "in_features", None)
        or (fc.weight.shape[-1] if getattr(fc, "weight", None) is not None else None),
        dtype=str(getattr(hs, "dtype", "")),
    )


def wrap_traceback(module) -> None:
    """Copy the traceback SGLang's scheduler formats for the exception it caught."""
    orig = getattr(module, "get_exception_traceback", None)
    if orig is None or getattr(orig, "_kit_wrapped", False):
        return

    @functools.wraps(orig)
    def get_exception_traceback(*a, **k):
        text = orig(*a, **k)
        record("exception", where=module.__name__, traceback=str(text)[-6000:])
        return text

    get_exception_traceback._kit_wrapped = True
    module.get_exception_traceback = get_exception_traceback


def wrap_post_init(cls, observer, name: str = "__post_init__") -> None:
    orig = cls.__dict__.get(name)
    if orig is None or getattr(orig, "_kit_wrapped", False):
        return

    @functools.wraps(orig)
    def post(self, *a, **k):
        out = orig(self, *a, **k)
        observer(self)
        return out

    post._kit_wrapped = True
    setattr(cls, name, post)


# -- which module gets which wrapper ------------------------------------------------------------------------
@_safe("patch")
def patch_module(mod) -> None:
    name = mod.__name__
    if name == "sglang.srt.server_args" and hasattr(mod, "ServerArgs"):
        wrap_post_init(mod.ServerArgs, observe_server_args)
    elif name == "sglang.srt.configs.model_config" and hasattr(mod, "ModelConfig"):
        wrap_post_init(mod.ModelConfig, observe_model_config, "__init__")
    elif name == "sglang.srt.managers.scheduler":
        wrap_traceback(mod)
    if name.startswith("sglang.srt.models."):
        for obj in list(vars(mod).values()):
            if not isinstance(obj, type) or obj.__module__ != name:
                continue
            if name in DRAFT_MODULES:
                wrap_load_weights(obj, mod)
                if "fc" in getattr(obj.__init__, "__code__", type("c", (), {"co_names": ()})).co_names:
                    wrap_draft_forward(obj)
            else:
                wrap_capture(obj)


def install() -> None:
    wanted = lambda name: name.startswith("sglang.srt.")
    if os.environ.get(RECORD_ENV) and after_import.install("kit.rehearsal", wanted, patch_module):
        record("process", argv=sys.argv[:3], executable=sys.executable)


@_safe("chain")
def chain_next_sitecustomize() -> None:
    """Run the sitecustomize.py this one shadows (a distribution's or an environment's), as Python would have."""
    after_import.chain_next_sitecustomize(__file__)


install()
if __name__ == "sitecustomize":
    chain_next_sitecustomize()
