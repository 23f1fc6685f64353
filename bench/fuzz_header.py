"""Fuzz the safetensors header reader with hypothesis: every input either parses or raises CheckpointError.

Three generators, each for --examples inputs (default 4000, so >= 12k in all):
  raw      arbitrary bytes as a whole file (length prefix included) through read_header
  json     structured headers (names, dtypes incl. unknown, shapes incl. negatives/huge, offsets)
           serialised and wrapped with a correct length prefix and a random data length
  mutate   a valid file with one random byte flipped / truncated / extended
Counts any other exception as a failure; records peak RSS (no allocation follows declared sizes).

    python bench/fuzz_header.py [--examples 4000]

Prints one JSON document (last line of stdout).
"""

import argparse
import json
import resource
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _run import emit  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st

from kit.checkpoint.safetensors_io import CheckpointError, read_header  # noqa: E402

STATS = {"raw": [0, 0, 0], "json": [0, 0, 0], "mutate": [0, 0, 0]}  # ok, rejected, crashed
CRASHES: list[str] = []
FILE = Path(tempfile.mkdtemp(prefix="kit-fuzz-")) / "f.safetensors"


def check(kind: str, data: bytes) -> None:
    FILE.write_bytes(data)
    try:
        read_header(FILE)
        STATS[kind][0] += 1
    except CheckpointError:
        STATS[kind][1] += 1
    except Exception as e:  # noqa: BLE001 - this is what the fuzzer hunts
        STATS[kind][2] += 1
        if len(CRASHES) < 20:
            CRASHES.append(f"{kind}: {type(e).__name__}: {e}"[:300])


def with_len(raw: bytes, data_len: int) -> bytes:
    return struct.pack("<Q", len(raw)) + raw + b"\0" * data_len


dims = st.one_of(
    st.integers(0, 8),
    st.integers(-3, 3),
    st.integers(2**31, 2**70),
    st.floats(allow_nan=True),
    st.booleans(),
    st.text(max_size=3),
)
entry = st.fixed_dictionaries(
    {
        "dtype": st.one_of(
            st.sampled_from(["F32", "BF16", "I64", "BOOL", "F4", "F6_E2M3", "F8_E4M3"]), st.text(max_size=4)
        ),
        "shape": st.one_of(st.lists(dims, max_size=4), st.integers(), st.none()),
        "data_offsets": st.one_of(
            st.lists(st.one_of(st.integers(-5, 300), st.integers(2**60, 2**80)), max_size=3),
            st.none(),
            st.text(max_size=3),
        ),
    }
)
header = st.dictionaries(
    st.one_of(st.text(max_size=8), st.just("__metadata__")),
    st.one_of(entry, st.integers(), st.text(max_size=3), st.dictionaries(st.text(max_size=2), st.text(max_size=2))),
    max_size=6,
)


def valid_file(n: int) -> bytes:
    doc, pos = {"__metadata__": {"format": "pt"}}, 0
    for i in range(n):
        doc[f"t{i}"] = {"dtype": "F32", "shape": [i + 1, 2], "data_offsets": [pos, pos + 8 * (i + 1)]}
        pos += 8 * (i + 1)
    return with_len(json.dumps(doc).encode(), pos)


def run(examples: int) -> None:
    cfg = settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))

    @cfg
    @given(st.binary(max_size=400))
    def raw(b):
        check("raw", b)

    @cfg
    @given(header, st.integers(0, 400))
    def structured(h, data_len):
        check("json", with_len(json.dumps(h).encode(), data_len))

    @cfg
    @given(
        st.integers(1, 5), st.integers(0, 10**6), st.integers(0, 255), st.sampled_from(["flip", "cut", "grow", "len"])
    )
    def mutate(n, where, byte, how):
        b = bytearray(valid_file(n))
        i = where % len(b)
        if how == "flip":
            b[i] = byte
        elif how == "cut":
            del b[i:]
        elif how == "grow":
            b += bytes([byte]) * (where % 64 + 1)
        else:
            b[:8] = struct.pack("<Q", where * 997 + byte)
        check("mutate", bytes(b))

    raw()
    structured()
    mutate()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=4000, help="inputs per generator")
    a = ap.parse_args()
    t0 = time.perf_counter()
    run(a.examples)
    total = sum(sum(v) for v in STATS.values())
    out = {
        "bench": "fuzz_header",
        "tool": "hypothesis",
        "inputs": total,
        "per_generator": {k: {"parsed": v[0], "rejected": v[1], "crashed": v[2]} for k, v in STATS.items()},
        "crashes": CRASHES,
        "seconds": round(time.perf_counter() - t0, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "pass": not CRASHES and total >= 10000,
    }
    FILE.unlink(missing_ok=True)
    FILE.parent.rmdir()
    emit(out)


if __name__ == "__main__":
    main()
