"""Draft-vocabulary maps `d2t` / `t2d`: are they what SGLang needs?

`d2t[i]` is an offset: draft id i means target id `i + d2t[i]` (SGLang's `hot_token_id = d2t + arange(Vd)`).
Trainers build the maps from the sorted kept ids, so `arange(Vd) + d2t` must be strictly increasing inside `[0, V)`
(V: the target's vocabulary), and `t2d` (bool `[V]`) must mark exactly those ids; `t2d` is graded only for a release
whose loader reads it. A draft with `Vd < V` and no `d2t` is served with draft ids used *as* target ids: graded by
the share of draft ids its `t2d` says mean another target id. The tensors are small, read with `array`, no torch:

    from kit.checkpoint.vocab import check_vocab
    findings = check_vocab(checkpoint, V=49152, Vd=8192)
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator, Sequence

from kit.checkpoint.safetensors_io import Checkpoint, TensorInfo, read_bytes
from kit.findings import Code, Finding, finding_list

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "ckpt/draft: notebook 02"
D2T = Code(
    "draft.d2t",
    SECTION,
    "error / warning / info",
    "`d2t`/`t2d` wrong: dtype/shape, `arange(Vd)+d2t` not strictly increasing or outside `[0,V)`, `t2d` "
    "disagreeing, or no `d2t` while `Vd < V` (graded by the share of draft ids `t2d` says mean another "
    "target id: info at none, warning up to 5%, error above)",
    "rebuild the maps from the sorted kept ids",
)

_INT_CODES = {"I64": "q", "I32": "i", "I16": "h", "I8": "b", "U8": "B"}
READ_LIMIT = 256 << 20
FIX = "rebuild the maps from the sorted kept target ids: d2t[i] = kept[i] - i, t2d[kept] = True"
FIX_MISSING = (
    "save the d2t offsets with the draft (speculators/SpecForge write them when draft_vocab_size "
    "differs from vocab_size; python -m kit convert derives them from t2d)"
)


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
        if (bad := next((i for i in range(1, len(hot)) if hot[i] <= hot[i - 1]), None)) is not None:
            errs.append(
                f"arange(Vd)+d2t is not strictly increasing at draft id {bad} "
                f"({hot[bad - 1]} then {hot[bad]}): duplicate or unsorted target ids"
            )
        if (out := next((i for i, h in enumerate(hot) if h < 0 or (V is not None and h >= V)), None)) is not None:
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


# A draft without d2t is served with draft id i as target id i. When its t2d shows the vocabulary is (nearly) the
# first Vd target ids, only the draft ids from the first gap on mean another token. Each proposal of such an id is
# rejected, so per-token acceptance falls by about the target's probability mass on them: their share of the draft
# ids when they are as likely as the rest (an upper estimate: they are the highest kept ids, which BPE
# vocabularies give to rarer merges). At a typical per-token acceptance of 0.7 and 3 steps, a fall of x in
# acceptance costs about x in accept length; above 5% that loss is larger than run-to-run noise and than what a
# retrained head gains back, so it is an error; below, a warning with the share.
WRONG_SHARE_ERROR = 0.05


def misnumbered_share(t2d: Sequence[bool], Vd: int) -> tuple[int, int | None] | None:
    """(how many draft ids i have kept[i] != i, the first such i) for the sorted kept ids t2d marks; None when t2d
    does not mark exactly Vd ids (it cannot then say what the draft ids mean)."""
    kept = [i for i, b in enumerate(t2d) if b]
    if len(kept) != Vd:
        return None
    # kept is strictly increasing, so kept[i] >= i and once kept[i] > i every later id is off too
    first = next((i for i, k in enumerate(kept) if k != i), None)
    return (0, None) if first is None else (Vd - first, first)


@finding_list
def check_vocab(
    ck: Checkpoint,
    V: int | None,
    Vd: int | None,
    lm_head: str | None = None,
    d2t_name: str = "d2t",
    t2d_name: str = "t2d",
    reads_t2d: bool = False,
) -> Iterator[Finding]:
    """Findings (code draft.d2t) for the d2t/t2d tensors of a checkpoint, `V` the target's vocabulary. t2d is
    graded when the release reads it (`reads_t2d`); otherwise it only tells what draft ids mean without d2t."""
    d, t = ck.tensors.get(d2t_name), ck.tensors.get(t2d_name)
    ev = {"V": V, "Vd": Vd}
    if d is None:
        if Vd is None or V is None or Vd >= V:
            return
        readable = t is not None and t.dtype == "BOOL" and list(t.shape) == [V] and t.nbytes <= READ_LIMIT
        share = misnumbered_share(_bools(t), Vd) if readable else None
        head = f"no d2t while draft vocab {Vd} < target vocab {V}: SGLang uses draft "
        if share is None:
            which = ", and t2d does not mark Vd ids to tell which" if t is not None else ""
            yield D2T(f"{head}ids as target ids{which}", ev, fix=FIX_MISSING)
            return
        wrong, first = share
        sev = "info" if wrong == 0 else "warning" if wrong / Vd <= WRONG_SHARE_ERROR else "error"
        said = f"t2d says {wrong} of {Vd} draft ids ({wrong / Vd:.2%}) mean another target id"
        tail = f"(from draft id {first} on): proposals of those ids are rejected"
        if wrong == 0:
            tail = "(the draft vocabulary is the first Vd target ids: served as trained)"
        title = f"{head}id i as target id i; {said} {tail}"
        ev |= {"misnumbered_draft_ids": wrong, "first_misnumbered": first, "error_above_share": WRONG_SHARE_ERROR}
        yield D2T(title, ev, sev, "" if wrong == 0 else FIX_MISSING)
        return
    t = t if reads_t2d else None
    errs = []
    if d.dtype not in _INT_CODES:
        errs.append(f"d2t dtype {d.dtype} is not an integer type (I64 expected)")
    if len(d.shape) != 1 or (Vd is not None and d.shape[0] != Vd):
        errs.append(f"d2t shape {list(d.shape)}, expected [{Vd}]")
    if t is not None and (t.dtype != "BOOL" or len(t.shape) != 1 or (V is not None and t.shape[0] != V)):
        errs.append(f"t2d is {t.dtype} {list(t.shape)}, expected BOOL [{V}]")
    if lm_head and lm_head in ck.tensors and d.shape and ck.tensors[lm_head].shape[0] != d.shape[0]:
        errs.append(f"lm_head has {ck.tensors[lm_head].shape[0]} rows but d2t has {d.shape[0]}")
    if not errs and (d.nbytes > READ_LIMIT or (t is not None and t.nbytes > READ_LIMIT)):
        yield D2T("d2t/t2d too large to read; values not checked", ev, "info")
        return
    errs = errs or check_maps(_ints(d), _bools(t) if t is not None else None, V, Vd)
    if errs:
        yield D2T(errs[0], {**ev, "problems": errs}, fix=FIX)
