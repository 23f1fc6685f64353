"""Header reader and streaming writer: valid files round-trip; every malformed header is one CheckpointError."""

import json
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.checkpoint.safetensors_io import (
    CheckpointError,
    WriteEntry,
    parse_header,
    read_checkpoint,
    read_header,
    sha256_of,
    write_safetensors,
    write_stream,
)
from kit.findings import KitInputError


def raw_file(path, header: dict, data_len: int, hlen=None):
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if hlen is None else hlen) + raw + b"\0" * data_len)
    return path


def test_roundtrip_with_safetensors_library(tmp_path):
    import torch
    from safetensors.torch import load_file

    ts = {
        "a": torch.randn(3, 4),
        "b": torch.arange(5),
        "m": torch.tensor([True, False]),
        "h": torch.randn(2, 2).to(torch.bfloat16),
        "e": torch.empty(0, 3),
    }
    hashes = write_safetensors(tmp_path / "x.safetensors", ts, {"k": "v"})
    back = load_file(tmp_path / "x.safetensors")
    assert set(back) == set(ts)
    for k in ts:
        assert torch.equal(back[k], ts[k])
    meta, infos = read_header(tmp_path / "x.safetensors")
    assert meta["k"] == "v" and meta["format"] == "pt"
    by = {t.name: t for t in infos}
    assert by["a"].dtype == "F32" and by["a"].shape == (3, 4) and by["a"].nbytes == 48
    assert by["b"].dtype == "I64" and sha256_of(by["a"]) == hashes["a"]


def test_reads_files_written_by_safetensors(tmp_path):
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.ones(7, 3, dtype=torch.float16)}, tmp_path / "m.safetensors")
    ck = read_checkpoint(tmp_path)
    assert ck.tensors["w"].shape == (7, 3) and ck.total_bytes == 42 and ck.total_params == 21


@pytest.mark.parametrize(
    "header,data_len,hlen,msg",
    [
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 4, None, "past the end"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 8, 10**12, "runs past the end of the file"),
        ({"a": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 8]}}, 8, None, "unknown dtype"),
        ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, 8, None, "needs 12 bytes"),
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
            },
            12,
            None,
            "overlap",
        ),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, 12, None, "gap"),
        ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, 8, None, "non-negative"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, 8, None, "begin <= end"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 20, None, "trailing bytes"),
        ({"a": [1, 2]}, 0, None, "not an object"),
    ],
)
def test_malformed_headers(tmp_path, header, data_len, hlen, msg):
    f = raw_file(tmp_path / "bad.safetensors", header, data_len, hlen)
    with pytest.raises(CheckpointError, match=msg):
        read_header(f)


def test_invalid_json_and_truncated(tmp_path):
    f = tmp_path / "j.safetensors"
    f.write_bytes(struct.pack("<Q", 5) + b"{nope")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        read_header(f)
    f.write_bytes(b"\x01\x02")
    with pytest.raises(CheckpointError, match="shorter than"):
        read_header(f)


def test_huge_declared_sizes_allocate_nothing(tmp_path):
    """A header declaring exabytes must fail on arithmetic, not by allocating (peak stays small)."""
    f = raw_file(
        tmp_path / "huge.safetensors", {"a": {"dtype": "F64", "shape": [2**40, 2**40], "data_offsets": [0, 2**83]}}, 0
    )
    tracemalloc.start()
    with pytest.raises(CheckpointError):
        read_header(f)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 5_000_000


def test_sharded_index_and_pickles(tmp_path):
    import torch

    write_safetensors(tmp_path / "s1.safetensors", {"a": torch.zeros(2)})
    write_safetensors(tmp_path / "s2.safetensors", {"b": torch.zeros(3)})
    idx = {"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(idx))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04 not to be unpickled")
    ck = read_checkpoint(tmp_path)
    assert set(ck.tensors) == {"a", "b"} and len(ck.files) == 2
    assert ck.pickle_files and ck.pickle_files[0].endswith(".bin")
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "s2.safetensors", "b": "s2.safetensors"}})
    )
    with pytest.raises(CheckpointError, match="does not hold it"):
        read_checkpoint(tmp_path)
    write_safetensors(tmp_path / "s9.safetensors", {"z": torch.zeros(1), "y": torch.zeros(1)})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"z": "s9.safetensors"}}))
    with pytest.raises(CheckpointError, match="the index does not list"):
        read_checkpoint(tmp_path)
    (tmp_path / "s9.safetensors").unlink()
    idx["weight_map"]["c"] = "s3.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(CheckpointError, match="does not exist"):
        read_checkpoint(tmp_path)


def test_pickle_only_refused(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04garbage")
    with pytest.raises(CheckpointError, match="pickle"):
        read_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="never unpickled"):
        read_checkpoint(tmp_path / "pytorch_model.bin")
    with pytest.raises(KitInputError):
        read_checkpoint(tmp_path / "absent")


def test_write_stream_rejects_short_producer_and_leaves_nothing(tmp_path):
    e = WriteEntry("x", "F32", (4,), lambda: [b"\0" * 8])
    with pytest.raises(ValueError, match="producer gave 8"):
        write_stream(tmp_path / "o.safetensors", [e])
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=2**20))
def test_fuzz_parse_header_only_raises_checkpoint_error(raw, data_len):
    try:
        parse_header(raw, data_len)
    except CheckpointError:
        pass


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=5),
        st.fixed_dictionaries(
            {
                "dtype": st.sampled_from(["F32", "I64", "BOOL", "F4", "XX"]),
                "shape": st.lists(st.integers(-1, 5), max_size=3),
                "data_offsets": st.lists(st.integers(-1, 64), min_size=0, max_size=3),
            }
        ),
        max_size=4,
    ),
    st.integers(0, 200),
)
def test_fuzz_structured_headers(doc, data_len):
    try:
        meta, entries = parse_header(json.dumps(doc).encode(), data_len)
    except CheckpointError:
        return
    assert sum(e[4] - e[3] for e in entries) == data_len
