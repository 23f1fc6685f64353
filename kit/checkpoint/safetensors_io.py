"""safetensors checkpoints read from their headers, and written tensor by tensor — no torch, no mmap.

Why: a 1T-parameter checkpoint must be inspectable on a laptop; `safetensors.safe_open` maps the whole file (and fails
on a 32 GB shard with 24 GB of RAM), importing torch costs seconds. A safetensors file is `u64 little-endian N`, N bytes
of JSON header, then raw tensor bytes: the header alone gives every name, dtype, shape and byte range. It is validated
(length vs file size, JSON, dtypes, shape x dtype size == byte span, offsets in range, contiguous) without allocating
in proportion to a declared size. Pickle weights are reported, never unpickled. A hub model is read the same way:
`kit.checkpoint.hub` writes a *header view* (`HEADER_VIEW`: per shard its URL, size and raw header), validated by the
same `parse_header`; tensor bytes come by range reads.

    ck = read_checkpoint("draft_dir")            # file, directory, or sharded index
    for t in ck.tensors.values(): print(t.name, t.dtype, t.shape, t.nbytes)

Writing (`convert`, the trainer): `write_stream` builds the header from (name, dtype, shape) entries, then copies each
tensor's bytes in bounded chunks from a producer, hashing as it goes; `write_safetensors(path, {name: torch.Tensor})`
is the torch form. Both write a temporary file and rename it.
How to run: `python -m kit.checkpoint.safetensors_io FILE_OR_DIR` prints the tensor listing as JSON.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from kit.findings import Code, KitInputError

SECTION = "ckpt/draft: notebook 02"
CORRUPT = Code(
    "ckpt.corrupt",
    SECTION,
    "error",
    "a checkpoint file cannot be validated: truncated, header length past EOF, invalid header JSON, unknown dtype, "
    "overlapping/out-of-range offsets, an index naming a missing shard, or pickle-only weights (never unpickled); `kit "
    "inspect`/`convert` exit 2",
    "re-export with safetensors; never load a file that fails validation",
)

# dtype -> bits per element (safetensors 0.8 set); sub-byte types pack several elements per byte
DTYPE_BITS: dict[str, int] = {
    **dict.fromkeys(("BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0"), 8),
    "F4": 4,
    **dict.fromkeys(("F6_E2M3", "F6_E3M2"), 6),
    **dict.fromkeys(("I16", "U16", "F16", "BF16"), 16),
    **dict.fromkeys(("I32", "U32", "F32"), 32),
    **dict.fromkeys(("F64", "I64", "U64", "C64"), 64),
}
# the Rust library refuses headers above 100 MB; we do too, before reading them
MAX_HEADER_BYTES = 100_000_000
CHUNK = 8 << 20
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
INDEX_NAME = "model.safetensors.index.json"
# a header view (kit.checkpoint.hub): {"files": {shard: {"url", "size", "header"}}, "kept": {tensor: offset}}, the
# weights left on the hub; the few small tensors whose values the checks read are kept in HEADER_VIEW_BYTES
HEADER_VIEW = "kit_safetensors_headers.json"
HEADER_VIEW_BYTES = "kit_safetensors_kept.bin"


class CheckpointError(KitInputError):
    """The checkpoint cannot be read as declared (truncated, malformed, pickle...). Code ckpt.corrupt."""

    code = CORRUPT.code


class TensorInfo(NamedTuple):
    """One tensor's header facts (a tuple: ~70k of them are built per 1T checkpoint)."""

    name: str
    dtype: str
    shape: tuple  # tuple[int, ...]
    file: str  # path of the shard holding it
    start: int  # absolute byte offset of the first data byte in `file`
    end: int  # absolute offset one past the last byte

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class Checkpoint:
    """Every tensor of a checkpoint (one file, a directory or a sharded index), from headers only."""

    path: str
    files: list[str]
    tensors: dict[str, TensorInfo]
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)  # file -> __metadata__
    pickle_files: list[str] = field(default_factory=list)  # seen, never opened

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    @property
    def total_params(self) -> int:
        return sum(t.numel for t in self.tensors.values())

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: t.shape for k, t in self.tensors.items()}


def _bad(path: Any, msg: str) -> CheckpointError:
    return CheckpointError(f"{path}: {msg}")


def _byte_size(dtype: str, shape: tuple[int, ...], path: Any, name: str) -> int:
    bits = DTYPE_BITS[dtype] * math.prod(shape)  # python ints: no overflow on absurd shapes
    if bits % 8:
        raise _bad(path, f"tensor {name!r}: {dtype} {list(shape)} is not a whole number of bytes")
    return bits // 8


def _explain(name: str, e: Any, data_len: int, path: Any) -> None:
    """Raise the precise CheckpointError for a header entry the fast path rejected."""
    if not isinstance(e, dict):
        raise _bad(path, f"tensor {name!r}: entry is not an object")
    dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise _bad(path, f"tensor {name!r}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise _bad(path, f"tensor {name!r}: shape must be a list of non-negative integers, got {str(shape)[:80]}")
    if (
        not isinstance(offs, list)
        or len(offs) != 2
        or not all(type(o) is int and o >= 0 for o in offs)
        or offs[0] > offs[1]
    ):
        raise _bad(
            path, f"tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end, got {str(offs)[:80]}"
        )
    need = _byte_size(dtype, tuple(shape), path, name)
    if offs[1] - offs[0] != need:
        raise _bad(
            path, f"tensor {name!r}: {dtype} {shape} needs {need} bytes but data_offsets span {offs[1] - offs[0]}"
        )
    raise _bad(
        path,
        f"tensor {name!r}: data_offsets end {offs[1]} is past the end of the data "
        f"({data_len} bytes): file truncated or offsets out of range",
    )


def parse_header(
    raw: bytes, data_len: int, path: Any = "<bytes>", file: str | None = None, base: int = 0
) -> tuple[dict, list]:
    """Validate one header's JSON bytes against `data_len` bytes of data after it; a CheckpointError otherwise.

    Returns (metadata, entries sorted by offset): with `file`, TensorInfo whose offsets are absolute (`base` +
    relative); without, (name, dtype, shape, begin, end) relative tuples."""
    try:
        doc = orjson.loads(raw)  # the same document as json.loads, in ~45% of its time on a 1k-tensor header
    except (UnicodeDecodeError, ValueError) as e:
        raise _bad(path, f"header is not valid JSON ({str(e).splitlines()[0][:120]})")
    if not isinstance(doc, dict):
        raise _bad(path, "header is not a JSON object")
    meta = doc.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise _bad(path, "__metadata__ must map strings to strings")
    entries = []
    add = entries.append
    make = tuple.__new__
    bits_of = DTYPE_BITS
    for name, e in doc.items():
        # fast path: plain checks in one try; any anomaly goes to _explain for the precise message
        try:
            dtype, shape, (b, en) = e["dtype"], e["shape"], e["data_offsets"]
            n = bits_of[dtype]
            for d in shape:
                if type(d) is not int or d < 0:
                    raise ValueError
                n *= d
            if (
                type(shape) is not list
                or type(b) is not int
                or type(en) is not int
                or not 0 <= b <= en <= data_len
                or n & 7
                or en - b != n >> 3
            ):
                raise ValueError
        except Exception:
            _explain(name, e, data_len, path)
        if file is None:
            add((name, dtype, tuple(shape), b, en))
        else:
            add(make(TensorInfo, (name, dtype, tuple(shape), file, base + b, base + en)))
    s_i, e_i = (3, 4) if file is None else (4, 5)
    pos = base
    for t in entries:  # usually already in offset order: sort only when not
        if t[s_i] < pos:
            entries.sort(key=itemgetter(s_i, e_i))
            break
        pos = t[e_i]
    pos = base
    for t in entries:
        b, e = t[s_i], t[e_i]
        if b != pos:
            if b < pos:
                raise _bad(
                    path,
                    f"tensor {t[0]!r}: data_offsets [{b - base}, {e - base}] overlap the previous tensor "
                    f"(ends at {pos - base})",
                )
            raise _bad(path, f"tensor {t[0]!r}: gap of {b - pos} bytes before it (offsets must be contiguous)")
        pos = e
    if pos - base != data_len:
        raise _bad(
            path,
            f"tensors cover {pos - base} bytes but the file holds {data_len} data bytes "
            f"({'truncated' if pos - base > data_len else 'trailing bytes'})",
        )
    return meta, entries


def read_header(path: str | Path) -> tuple[dict[str, str], list[TensorInfo]]:
    """(metadata, tensors) of one .safetensors file; reads 8 + N bytes, nothing more."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise _bad(p, f"file is {size} bytes, shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise _bad(
                    p, f"header length {n} runs past the end of the file ({size} bytes): truncated or not safetensors"
                )
            if n > MAX_HEADER_BYTES:
                raise _bad(p, f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
            raw = f.read(n)
    except OSError as e:
        raise _bad(p, f"cannot read ({e.strerror})")
    if len(raw) != n:
        raise _bad(p, "file changed size while reading")
    return parse_header(raw, size - 8 - n, p, str(p), 8 + n)


def _read_index(index: Path) -> dict[str, str]:
    try:
        doc = json.loads(index.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise _bad(index, f"cannot read the shard index ({e})")
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict) or (wm and set(map(type, wm.values())) != {str}):
        raise _bad(index, "shard index has no weight_map of tensor name -> shard file")
    return wm


def _add_shard(tensors: dict[str, TensorInfo], infos: list[TensorInfo], where: Any) -> list[str]:
    """Add one shard's tensors; a name two shards hold is a CheckpointError. Returns the shard's names."""
    names = [t[0] for t in infos]
    dup = tensors.keys() & set(names)
    if dup:
        n = sorted(dup)[0]
        raise _bad(where, f"tensor {n!r} also appears in {tensors[n].file}")
    tensors.update(zip(names, infos))
    return names


def weights_bytes(path: str | Path | None) -> int | None:
    """Bytes of a model directory's safetensors weights; None for no directory (a hub id) or one without weights."""
    if not path or not Path(path).is_dir():
        return None
    try:
        return read_checkpoint(path).total_bytes or None
    except KitInputError:
        return None


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read every header of a .safetensors file, a sharded index, or a model directory."""
    p = Path(path)
    if not p.exists():
        raise KitInputError(f"{p}: no such file or directory")
    if p.is_dir() and (p / HEADER_VIEW).is_file() and not any(p.glob("*.safetensors")):
        return read_header_view(p / HEADER_VIEW)
    pickles: list[str] = []
    index = p if p.name.endswith(".index.json") else None
    files = [p]
    if p.is_dir():
        pickles = sorted(str(q) for q in p.iterdir() if q.suffix in PICKLE_SUFFIXES)
        index = p / INDEX_NAME if (p / INDEX_NAME).exists() else None
        files = sorted(p.glob("*.safetensors"))
    elif p.suffix in PICKLE_SUFFIXES:
        raise _bad(p, "pickle weights are never unpickled by the kit (they can run code); re-save as safetensors")
    wm: dict[str, str] | None = None
    shards: list[str | None] = [None] * len(files)
    if index is not None:
        wm = _read_index(index)
        shards = sorted(set(wm.values()))
        files = [index.parent / s for s in shards]
        root = p.resolve() if p.is_dir() else None
        for shard, q in zip(shards, files):
            if root and not q.resolve().is_relative_to(root):
                raise _bad(index, f"shard {shard!r} lies outside the checkpoint directory")
            if not q.is_file():
                raise _bad(index, f"names shard {shard!r}, which does not exist")
    if p.is_dir() and not files:
        if pickles:
            raise _bad(
                p,
                f"only pickle weights ({', '.join(Path(x).name for x in pickles)}); "
                "pickle files can run code when loaded and are never opened by the kit — "
                "re-save as safetensors (save_pretrained(..., safe_serialization=True))",
            )
        raise _bad(p, "no .safetensors files and no model.safetensors.index.json")
    tensors: dict[str, TensorInfo] = {}
    metas: dict[str, dict[str, str]] = {}
    actual: dict[str, str] = {}  # tensor -> shard name as the index spells it
    for f, shard in zip(files, shards):
        meta, infos = read_header(f)
        metas[str(f)] = meta
        names = _add_shard(tensors, infos, f)
        if shard is not None:
            actual.update(zip(names, repeat(shard)))
    if wm is not None and actual != wm:  # dict equality runs in C; find the culprit only on failure
        shard_file = {s: str(index.parent / s) for s in set(wm.values())}
        wrong = [n for n, t in tensors.items() if shard_file.get(wm.get(n, "")) != t[3]]
        n = wrong[0] if wrong else next(x for x in wm if x not in tensors)  # else the index names extra ones
        if n not in wm:
            raise _bad(p, f"shards hold {len(wrong)} tensor(s) the index does not list, e.g. {n!r}")
        raise _bad(p, f"index maps {n!r} to {wm[n]!r}, which does not hold it")
    return Checkpoint(str(p), [str(f) for f in files], tensors, metas, pickles)


def _parse_view_shard(url: str, size: int, raw: bytes) -> tuple[dict, list]:
    """parse_header for one shard of a header view (its URL, file size and raw header)."""
    return parse_header(raw, size - 8 - len(raw), url, url, 8 + len(raw))


def read_header_view(view: str | Path) -> Checkpoint:
    """The checkpoint a header view describes (its shards' headers, validated as a local file's are)."""
    view = Path(view)
    try:
        doc = json.loads(view.read_text())
        items = [(str(f["url"]), int(f["size"]), str(f["header"]).encode()) for f in doc["files"].values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise _bad(view, f"unreadable header view ({e})")
    tensors: dict[str, TensorInfo] = {}
    metas: dict[str, dict[str, str]] = {}
    for url, size, raw in items:
        metas[url], infos = _parse_view_shard(url, size, raw)
        _add_shard(tensors, infos, url)
    kept = str(view.parent / HEADER_VIEW_BYTES)
    for name, offset in (doc.get("kept") or {}).items():  # read from the view, not the hub (works offline)
        t = tensors.get(name)
        if t is None or not isinstance(offset, int) or offset < 0:
            raise _bad(view, f"kept tensor {name!r} is not in the headers")
        _KEPT[(t.file, t.start)] = (kept, offset)
    return Checkpoint(str(view.parent), [u for u, _, _ in items], tensors, metas)


# (shard URL, start) -> (local file, offset): where a header view keeps a tensor's bytes (filled by read_header_view)
_KEPT: dict[tuple[str, int], tuple[str, int]] = {}


def _remote_bytes(t: TensorInfo, chunk: int) -> Iterator[bytes]:
    """A tensor of a header view, by HTTP range reads through huggingface_hub's session (its token, its
    offline switch: HF_HUB_OFFLINE raises before any request)."""
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    headers = build_hf_headers()
    for a in range(t.start, t.end, chunk):
        b = min(a + chunk, t.end)
        try:
            r = get_session().get(t.file, headers={**headers, "range": f"bytes={a}-{b - 1}"})
            hf_raise_for_status(r)
        except Exception as e:  # offline, no network, an expired token: one line naming the tensor
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise KitInputError(f"{t.file}: tensor {t.name!r}: cannot be read from the hub ({first})") from None
        if len(r.content) != b - a:
            raise _bad(t.file, f"tensor {t.name!r}: range read gave {len(r.content)} bytes, expected {b - a}")
        yield r.content


def iter_bytes(t: TensorInfo, chunk: int = CHUNK) -> Iterator[bytes]:
    """The tensor's raw bytes in chunks of at most `chunk` (bounded memory)."""
    file, start = t.file, t.start
    if file.startswith(("http://", "https://")):  # a header view's shard
        if (file, start) not in _KEPT:
            yield from _remote_bytes(t, chunk)
            return
        file, start = _KEPT[(file, start)]
    with open(file, "rb") as f:
        f.seek(start)
        left = t.nbytes
        while left:
            b = f.read(min(chunk, left))
            if not b:
                raise _bad(t.file, f"tensor {t.name!r}: file ended early")
            left -= len(b)
            yield b


def read_bytes(t: TensorInfo, limit: int = 1 << 30) -> bytes:
    """All bytes of a (small) tensor; refuses more than `limit` so a bad header cannot OOM us."""
    if t.nbytes > limit:
        raise _bad(t.file, f"tensor {t.name!r} is {t.nbytes} bytes, above the {limit}-byte read limit")
    return b"".join(iter_bytes(t))


def sha256_of(t: TensorInfo) -> str:
    """sha256 of the tensor's bytes; hashing a chunk overlaps reading the next (hashlib drops the GIL)."""
    import hashlib
    from concurrent.futures import ThreadPoolExecutor

    h = hashlib.sha256()
    with ThreadPoolExecutor(1) as pool:
        fut = None
        for b in iter_bytes(t):
            if fut is not None:
                fut.result()
            fut = pool.submit(h.update, b)
        if fut is not None:
            fut.result()
    return h.hexdigest()


def load_tensor(t: TensorInfo):
    """A torch tensor with the data of `t` (imports torch; for small tensors and tests)."""
    return bytes_to_torch(read_bytes(t), t.dtype, t.shape)


def bytes_to_torch(data: bytes, dtype: str, shape: tuple):
    """A torch tensor of safetensors `dtype` and `shape` holding a copy of `data`."""
    import torch

    dt = getattr(torch, TORCH_DTYPES[dtype])
    return torch.frombuffer(bytearray(data), dtype=dt).reshape(shape) if data else torch.empty(shape, dtype=dt)


# safetensors dtype <-> torch dtype attribute name
TORCH_DTYPES = dict(
    pair.split("=")
    for pair in "F64=float64 F32=float32 F16=float16 BF16=bfloat16 I64=int64 I32=int32 I16=int16 I8=int8 U8=uint8 "
    "BOOL=bool F8_E4M3=float8_e4m3fn F8_E5M2=float8_e5m2 U16=uint16 U32=uint32 U64=uint64".split()
)


@dataclass
class WriteEntry:
    """One tensor to write: its header facts and a producer of its bytes (called once)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    chunks: Callable[[], Iterable[bytes]]


def build_header(entries: list[WriteEntry], metadata: dict[str, str] | None = None) -> bytes:
    doc: dict[str, Any] = {}
    if metadata:
        doc["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    pos = 0
    for e in entries:
        n = _byte_size(e.dtype, tuple(e.shape), "<writer>", e.name)
        doc[e.name] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [pos, pos + n]}
        pos += n
    raw = json.dumps(doc, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # pad so data starts 8-byte aligned, as the Rust writer does
    return struct.pack("<Q", len(raw)) + raw


def write_stream(path: str | Path, entries: list[WriteEntry], metadata: dict[str, str] | None = None) -> dict[str, str]:
    """Write a .safetensors file tensor by tensor (one chunk in memory), renamed into `path` when complete; returns
    {name: sha256 of its bytes}."""
    import hashlib
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    path = Path(path)
    if len({e.name for e in entries}) != len(entries):
        raise ValueError("duplicate tensor names")
    header = build_header(entries, metadata)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    hashes: dict[str, str] = {}
    try:
        with os.fdopen(fd, "wb") as f, ThreadPoolExecutor(1) as pool:
            f.write(header)
            for e in entries:
                need = _byte_size(e.dtype, tuple(e.shape), path, e.name)
                h, got = hashlib.sha256(), 0
                for b in e.chunks():
                    got += len(b)
                    if got > need:
                        break
                    fut = pool.submit(h.update, b)  # hash on a second core while this one writes
                    f.write(b)
                    fut.result()
                if got != need:
                    raise ValueError(f"{e.name}: producer gave {got} bytes, header declares {need}")
                hashes[e.name] = h.hexdigest()
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return hashes


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def torch_to_st_dtype(dtype) -> str:
    st = {tn: st for st, tn in TORCH_DTYPES.items()}.get(str(dtype).removeprefix("torch."))
    if st is None:
        raise ValueError(f"dtype {dtype} has no safetensors equivalent")
    return st


def _torch_chunks(t) -> Iterator[bytes]:
    import torch

    c = t.detach().to("cpu").contiguous().reshape(-1)
    flat = c.view(torch.uint8) if c.numel() else torch.empty(0, dtype=torch.uint8)
    for i in range(0, flat.numel(), CHUNK):
        yield flat[i : i + CHUNK].numpy().tobytes()


def write_safetensors(
    path: str | Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None
) -> dict[str, str]:
    """Save {name: torch.Tensor} as safetensors (readable by `safetensors`/HF); returns sha256s."""
    entries = [
        WriteEntry(k, torch_to_st_dtype(v.dtype), tuple(v.shape), partial(_torch_chunks, v)) for k, v in tensors.items()
    ]
    return write_stream(path, entries, {"format": "pt", **(metadata or {})})


if __name__ == "__main__":
    tensors = read_checkpoint(sys.argv[1]).tensors.values()
    print(json.dumps([{"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "file": t.file} for t in tensors]))
