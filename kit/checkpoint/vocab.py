"""Draft-vocabulary maps `d2t` / `t2d`: are they what SGLang needs?

`d2t[i]` is an offset: draft id i means target id `i + d2t[i]`; SGLang turns it into
`hot_token_id = d2t + arange(Vd)` and ignores `t2d`. Every trainer builds them from the sorted
kept ids, so `arange(Vd) + d2t` must be strictly increasing inside `[0, V)`, and `t2d` (bool
`[V]`) must mark exactly those ids (`t2d.sum() == Vd`). A draft with `Vd < V` and no `d2t`
is served with draft ids used *as* target ids — silently wrong.

The tensors are small (Vd int64, V bool), read with the stdlib (`array`), no torch:

    from kit.checkpoint.vocab import check_vocab
    findings = check_vocab(checkpoint, V=49152, Vd=8192)
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence

from kit.checkpoint.safetensors_io import Checkpoint, TensorInfo, read_bytes
from kit.findings import Finding

_INT_CODES = {"I64": "q", "I32": "i", "I16": "h", "I8": "b", "U8": "B"}
READ_LIMIT = 256 << 20


def _ints(t: TensorInfo) -> list[int]:
    a = array(_INT_CODES[t.dtype])
    a.frombytes(read_bytes(t, READ_LIMIT))
    if sys.byteorder != "little" and a.itemsize > 1:
        a.byteswap()
    return a.tolist()


def _bools(t: TensorInfo) -> list[bool]:
    return [b != 0 for b in read_bytes(t, READ_LIMIT)]


def check_maps(d2t: Sequence[int] | None, t2d: Sequence[bool] | None, V: int | None, Vd: int | None) -> list[str]:
    """Problems with the map *values* (empty list: consistent). Pure python, used by tests too."""
    errs: list[str] = []
    if d2t is not None:
        hot = [i + int(x) for i, x in enumerate(d2t)]
        if Vd is not None and len(hot) != Vd:
            errs.append(f"d2t has {len(hot)} entries, draft_vocab_size is {Vd}")
        bad = next((i for i in range(1, len(hot)) if hot[i] <= hot[i - 1]), None)
        if bad is not None:
            errs.append(
                f"arange(Vd)+d2t is not strictly increasing at draft id {bad} "
                f"({hot[bad - 1]} then {hot[bad]}): duplicate or unsorted target ids"
            )
        out = next((i for i, h in enumerate(hot) if h < 0 or (V is not None and h >= V)), None)
        if out is not None:
            errs.append(f"draft id {out} maps to target id {hot[out]}, outside [0, {V})")
        if t2d is not None:
            kept = [i for i, b in enumerate(t2d) if b]
            if len(kept) != len(hot):
                errs.append(f"t2d marks {len(kept)} ids but d2t has {len(hot)}")
            elif kept != hot:
                first = next(i for i, (a, b) in enumerate(zip(kept, hot)) if a != b)
                errs.append(f"t2d and d2t disagree at draft id {first}: t2d says {kept[first]}, d2t says {hot[first]}")
    if t2d is not None and V is not None and len(t2d) != V:
        errs.append(f"t2d has {len(t2d)} entries, target vocab_size is {V}")
    return errs


def check_vocab(
    ck: Checkpoint,
    V: int | None,
    Vd: int | None,
    lm_head: str | None = None,
    d2t_name: str = "d2t",
    t2d_name: str = "t2d",
) -> list[Finding]:
    """Findings (code draft.d2t) for the d2t/t2d tensors of a checkpoint."""
    d, t = ck.tensors.get(d2t_name), ck.tensors.get(t2d_name)
    ev = {"V": V, "Vd": Vd}
    fix = "rebuild the maps from the sorted kept target ids: d2t[i] = kept[i] - i, t2d[kept] = True"
    out: list[Finding] = []
    if d is None:
        if Vd is not None and V is not None and Vd < V:
            out.append(
                Finding(
                    code="draft.d2t",
                    severity="error",
                    title=f"no d2t while draft vocab {Vd} < target vocab {V}: SGLang uses draft ids as target ids",
                    evidence=ev,
                    fix="save the d2t offsets with the draft (speculators/SpecForge write them "
                    "when draft_vocab_size differs from vocab_size)",
                )
            )
        return out
    shape_errs = []
    if d.dtype not in _INT_CODES:
        shape_errs.append(f"d2t dtype {d.dtype} is not an integer type (I64 expected)")
    if len(d.shape) != 1 or (Vd is not None and d.shape[0] != Vd):
        shape_errs.append(f"d2t shape {list(d.shape)}, expected [{Vd}]")
    if t is not None and (t.dtype != "BOOL" or len(t.shape) != 1 or (V is not None and t.shape[0] != V)):
        shape_errs.append(f"t2d is {t.dtype} {list(t.shape)}, expected BOOL [{V}]")
    if lm_head and lm_head in ck.tensors and d.shape and ck.tensors[lm_head].shape[0] != d.shape[0]:
        shape_errs.append(f"lm_head has {ck.tensors[lm_head].shape[0]} rows but d2t has {d.shape[0]}")
    if shape_errs:
        return [
            Finding(
                code="draft.d2t",
                severity="error",
                title=shape_errs[0],
                evidence={**ev, "problems": shape_errs},
                fix=fix,
            )
        ]
    if d.nbytes > READ_LIMIT or (t is not None and t.nbytes > READ_LIMIT):
        return [
            Finding(
                code="draft.d2t", severity="info", title="d2t/t2d too large to read; values not checked", evidence=ev
            )
        ]
    errs = check_maps(_ints(d), _bools(t) if t is not None else None, V, Vd)
    if errs:
        out.append(
            Finding(code="draft.d2t", severity="error", title=errs[0], evidence={**ev, "problems": errs}, fix=fix)
        )
    return out
