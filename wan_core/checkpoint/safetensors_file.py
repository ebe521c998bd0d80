"""The safetensors file format, read without mapping the file: the header parsed and checked here, each tensor
read with plain file reads into its own buffer (docs/memory.md section 2).

Why not ``safetensors.safe_open``: it maps the whole file copy-on-write, and Linux's default overcommit
heuristic refuses a private mapping larger than RAM + swap, so a 28.6 GB fp16 14B file could not even be opened
on a 24 GB machine (issue 49) although its tensors are read one at a time. Nothing here maps the file.

Layout (huggingface/safetensors, docs "format"): 8 bytes little-endian header length ``n``; ``n`` bytes of JSON,
an object ``{name: {"dtype": str, "shape": [int], "data_offsets": [begin, end]}, "__metadata__": {str: str}}``;
then the data, offsets relative to its start. The header is data from whoever published the file, so every
entry is checked before any tensor is read: offsets inside the file, no two tensors sharing bytes, sizes equal
to shape x dtype size, a header size cap, a JSON object without duplicate names.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch

MAX_HEADER_BYTES = 100 * 2**20  # the cap safetensors itself applies; real headers are well under 10 MB

# Element size in bits of every dtype code the format defines (sub-byte types included, so their sizes can
# still be checked); the torch dtype where this torch build has one.
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E5M2FNUZ": 8, "F8_E4M3FNUZ": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "I64": 64, "U64": 64,
    "F64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
TORCH_DTYPES: dict[str, torch.dtype] = {code: dt for code, dt in {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
    "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
    "U16": getattr(torch, "uint16", None), "U32": getattr(torch, "uint32", None),
    "U64": getattr(torch, "uint64", None), "C64": torch.complex64,
    "F8_E4M3": getattr(torch, "float8_e4m3fn", None), "F8_E5M2": getattr(torch, "float8_e5m2", None),
    "F8_E4M3FNUZ": getattr(torch, "float8_e4m3fnuz", None), "F8_E5M2FNUZ": getattr(torch, "float8_e5m2fnuz", None),
    "F8_E8M0": getattr(torch, "float8_e8m0fnu", None),
}.items() if dt is not None}


class SafetensorsFormatError(ValueError):
    """The file is not a valid safetensors file; the message is one line naming the file and the fault."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the header: its dtype code, shape, and absolute byte range ``[start, end)`` in the file."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class SafetensorsHeader:
    """A checked header: ``tensors`` in file order of their names as written, ``metadata`` (str -> str)."""

    path: str
    file_size: int
    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the name {key!r} appears twice")
        out[key] = value
    return out


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _entry(name: str, raw: object, data_start: int, data_size: int) -> TensorEntry:
    """The checked entry of tensor ``name`` (ValueError saying what is wrong otherwise)."""
    if not isinstance(raw, dict):
        raise ValueError(f"tensor {name!r}: expected an object with dtype, shape and data_offsets, found "
                         f"{type(raw).__name__}")
    code, shape, offsets = raw.get("dtype"), raw.get("shape"), raw.get("data_offsets")
    if not isinstance(code, str) or code not in DTYPE_BITS:
        raise ValueError(f"tensor {name!r}: unknown dtype {code!r}")
    if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
        raise ValueError(f"tensor {name!r}: shape {shape!r} is not a list of non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise ValueError(f"tensor {name!r}: data_offsets {offsets!r} is not [begin, end] with 0 <= begin <= end")
    if offsets[1] > data_size:
        raise ValueError(f"tensor {name!r}: data_offsets {offsets} run past the end of the data "
                         f"({data_size} bytes): the file is truncated (an interrupted download?) or its header lies")
    numel = 1
    for s in shape:
        numel *= s
    bits = numel * DTYPE_BITS[code]
    if bits % 8 or bits // 8 != offsets[1] - offsets[0]:
        raise ValueError(f"tensor {name!r}: shape {shape} of {code} needs {bits / 8:g} bytes but data_offsets "
                         f"{offsets} hold {offsets[1] - offsets[0]}")
    return TensorEntry(code, tuple(shape), data_start + offsets[0], data_start + offsets[1])


def _check_disjoint(tensors: dict[str, TensorEntry]) -> None:
    """Two tensors must not share bytes (a forged header could alias one tensor's data to another's)."""
    spans = sorted((e.start, e.end, name) for name, e in tensors.items() if e.end > e.start)
    for (_, end_a, a), (start_b, _, b) in zip(spans, spans[1:]):
        if start_b < end_a:
            raise ValueError(f"tensors {a!r} and {b!r} overlap (bytes {start_b}-{end_a} belong to both)")


def _parse(blob: bytes, data_start: int, file_size: int) -> tuple[dict[str, TensorEntry], dict[str, str]]:
    try:
        header = json.loads(blob.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError as e:
        raise ValueError(f"the header is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"the header is not valid JSON ({e.msg} at byte {e.pos})") from None
    except RecursionError:  # a forged header nested deeper than the parser's stack
        raise ValueError("the header's JSON is nested too deeply to be a tensor table") from None
    if not isinstance(header, dict):
        raise ValueError(f"the header is a JSON {type(header).__name__}, not an object of tensors")
    metadata = header.pop("__metadata__", None)
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError("__metadata__ is not an object of strings")
    tensors = {name: _entry(name, raw, data_start, file_size - data_start) for name, raw in header.items()}
    _check_disjoint(tensors)
    return tensors, metadata


def read_header(path: str | os.PathLike) -> SafetensorsHeader:
    """Parse and check the header of the safetensors file ``path`` (reads only the header bytes).

    Raises ``SafetensorsFormatError`` (one line: the file and the fault) for a truncated file, a header length
    over ``MAX_HEADER_BYTES`` or past the end of the file, invalid JSON, and any entry that is malformed, points
    outside the file, overlaps another or disagrees with its shape; ``OSError`` when the file cannot be read.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise SafetensorsFormatError(f"{path}: not a safetensors file: {size} bytes, shorter than the 8-byte "
                                         f"header length (empty or truncated)")
        n = int.from_bytes(f.read(8), "little")
        if n > MAX_HEADER_BYTES:
            raise SafetensorsFormatError(f"{path}: not a safetensors file: its header length field says {n} bytes, "
                                         f"over the {MAX_HEADER_BYTES} byte cap (corrupt or another format)")
        if 8 + n > size:
            raise SafetensorsFormatError(f"{path}: truncated or not a safetensors file: the header needs {n} bytes "
                                         f"but the file has {size - 8} after the length field")
        blob = f.read(n)
    try:
        tensors, metadata = _parse(blob, 8 + n, size)
    except ValueError as e:
        raise SafetensorsFormatError(f"{path}: corrupt safetensors header: {e}; the file cannot be trusted, "
                                     f"download it again") from None
    return SafetensorsHeader(path, size, tensors, metadata)


def read_tensor(path: str | os.PathLike, entry: TensorEntry, dtype: torch.dtype) -> torch.Tensor:
    """The tensor of ``entry`` as ``dtype`` (its torch dtype), read with plain reads into a fresh buffer.

    No page of the file stays in the process's memory (the page cache may keep it, reclaimable). Raises
    ``EOFError`` when the file is shorter than the header says (it changed or was truncated since).
    """
    buf = torch.empty(entry.nbytes, dtype=torch.uint8)
    view = buf.numpy().data  # a memoryview over the tensor's bytes
    with open(path, "rb", buffering=0) as f:
        f.seek(entry.start)
        done = 0
        while done < entry.nbytes:
            got = f.readinto(view[done:])
            if not got:
                raise EOFError(f"the file ends {entry.nbytes - done} bytes before the tensor does")
            done += got
    return buf.view(dtype).reshape(entry.shape)
