"""Our safetensors header parser (wan_core/checkpoint/safetensors_file.py) against the ``safetensors`` package's own writer on
every dtype we read, and hostile headers, each refused in one line naming the file (issue 49)."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from wan_core.checkpoint import CheckpointError, open_checkpoint
from wan_core.checkpoint.safetensors_file import (
    MAX_HEADER_BYTES, TORCH_DTYPES, SafetensorsFormatError, read_header,
)


def _random(dtype: torch.dtype, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Random bit patterns for every dtype (all 256 byte values occur), floats kept finite where the test
    compares values: the comparison below is bitwise anyway."""
    n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


def test_every_dtype_read_as_safetensors_writes_it(tmp_path):
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for code, dtype in TORCH_DTYPES.items():
        for shape in ((3, 5), (7,), (), (0, 4), (2, 3, 4)):
            tensors[f"{code}.{len(shape)}.{shape and shape[0]}"] = _random(dtype, shape, g)
    path = tmp_path / "all_dtypes.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt", "wan_text_len": "32"})
    reference = load_file(str(path))
    sd = open_checkpoint(path)
    assert sorted(sd) == sorted(reference)
    assert sd.metadata == {"format": "pt", "wan_text_len": "32"}
    for k, ref in reference.items():
        got = sd[k]
        assert (sd.dtype(k), sd.shape(k)) == (ref.dtype, tuple(ref.shape)), k
        assert got.dtype == ref.dtype and got.shape == ref.shape, k
        assert torch.equal(got.reshape(-1).view(torch.uint8), ref.reshape(-1).view(torch.uint8)), k
    header = read_header(path)
    spans = sorted((e.start, e.end) for e in header.tensors.values())
    assert spans[-1][1] == path.stat().st_size  # safetensors writes the data to the end of the file


def test_codes_match_the_safetensors_package():
    """Every dtype code ``safetensors`` writes from torch is one we read, to the same torch dtype."""
    from safetensors.torch import _TYPES  # code -> torch dtype, the package's own table

    assert {code: TORCH_DTYPES.get(code) for code in _TYPES} == dict(_TYPES)


def _write(path: Path, header: object | bytes, data: bytes = b"", length: int | None = None) -> Path:
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob) if length is None else length) + blob + data)
    return path


def _f32(offsets, shape=(2,)):
    return {"dtype": "F32", "shape": list(shape), "data_offsets": list(offsets)}


HOSTILE = {
    "past_the_end": ({"a": _f32([0, 16], (4,))}, b"\0" * 8, None, "run past the end"),
    "overlapping": ({"a": _f32([0, 8]), "b": _f32([4, 12])}, b"\0" * 12, None, "overlap"),
    "same_bytes": ({"a": _f32([0, 8]), "b": _f32([0, 8])}, b"\0" * 8, None, "overlap"),
    "negative": ({"a": _f32([-8, 0])}, b"\0" * 8, None, "0 <= begin <= end"),
    "reversed": ({"a": _f32([8, 0])}, b"\0" * 8, None, "0 <= begin <= end"),
    "header_2gb": ({"a": _f32([0, 8])}, b"\0" * 8, 2**31, "over the"),
    "header_past_end": ({"a": _f32([0, 8])}, b"\0" * 8, 10_000, "truncated"),
    "shape_vs_size": ({"a": _f32([0, 8], (3,))}, b"\0" * 12, None, "needs 12 bytes"),
    "negative_dim": ({"a": _f32([0, 8], (-2,))}, b"\0" * 8, None, "non-negative integers"),
    "float_dim": ({"a": _f32([0, 8], (2.0,))}, b"\0" * 8, None, "non-negative integers"),
    "not_a_dict": ([1, 2, 3], b"", None, "not an object"),
    "entry_not_a_dict": ({"a": [0, 8]}, b"\0" * 8, None, "expected an object"),
    "unknown_dtype": ({"a": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, b"\0" * 16, None,
                      "unknown dtype"),
    "metadata_not_strings": ({"__metadata__": {"x": 1}, "a": _f32([0, 8])}, b"\0" * 8, None, "__metadata__"),
    "duplicate_names": (b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
                        b'"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', b"\0" * 8, None,
                        "appears twice"),
    "not_json": (b"{not json at all}", b"", None, "not valid JSON"),
    "not_utf8": (b'{"\xff\xfe": 1}', b"", None, "not UTF-8"),
    "nested_200k": (b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", b"", None, "nested too deeply"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_header_refused_in_one_line(tmp_path, case):
    header, data, length, words = HOSTILE[case]
    path = _write(tmp_path / f"{case}.safetensors", header, data, length)
    with pytest.raises(SafetensorsFormatError) as parsed:
        read_header(path)
    with pytest.raises(CheckpointError) as opened:
        open_checkpoint(path)
    for err in (parsed.value, opened.value):
        text = str(err)
        assert "\n" not in text and text.startswith(str(path)), text
        assert words in text, text
        assert "memory" not in text, text


def test_short_files_refused(tmp_path):
    for size in (0, 5):
        path = tmp_path / f"short{size}.safetensors"
        path.write_bytes(b"\0" * size)
        with pytest.raises(CheckpointError, match=f"{size} bytes, shorter than the 8-byte"):
            open_checkpoint(path)


def test_header_cap_is_checked_before_reading(tmp_path, monkeypatch):
    """A length just over the cap is refused without reading it; one at the cap is read (and judged as JSON)."""
    path = _write(tmp_path / "big.safetensors", b"{}", length=MAX_HEADER_BYTES + 1)
    with pytest.raises(SafetensorsFormatError, match="over the"):
        read_header(path)
    path = _write(tmp_path / "padded.safetensors", b"{}" + b" " * 1000)
    assert read_header(path).tensors == {}


def test_data_truncated_after_opening_is_named(tmp_path):
    """A file that shrinks between opening and reading (a copy still running) is reported as truncated."""
    path = tmp_path / "t.safetensors"
    save_file({"a": torch.arange(1000, dtype=torch.float32), "b": torch.ones(4)}, str(path))
    sd = open_checkpoint(path)
    spans = read_header(path).tensors
    last = max(spans, key=lambda k: spans[k].end)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 100)
    with pytest.raises(CheckpointError, match="shorter than its header says"):
        sd[last]
