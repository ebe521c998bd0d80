"""GGUF files (llama.cpp's container; city96's Wan conversions) read through the ``gguf`` package (docs/gguf.md).

Conventions of the Wan files: tensor names are the official ones; GGUF lists dims innermost first (the torch
shape is reversed); quantised data are uint8 rows of blocks (``ggml_blocks``); a ``comfy.gguf.orig_shape.<name>``
array overrides a shape; ``modulation`` tensors may have lost their leading 1. ``general.architecture`` is
"wan", "pig" or absent for Wan files (the keys decide then); any other is refused, naming what the file is.

The file is memory-mapped by ``gguf``; every tensor asked for is *copied* out of the map (no view is kept) and
the map's pages of it are dropped at once, so the loaded model owns its bytes, the peak of a load stays near the
tensor bytes and the map is freed with the reader.
"""
from __future__ import annotations

import mmap
import os
import warnings
from typing import Any

import numpy as np
import torch

from .ggml_blocks import BLOCK_TYPES, BY_ID, FLOAT_TYPES, dequantize_rows

WAN_ARCHITECTURES = ("wan", "pig")
# architectures other GGUF files declare -> what to call them in a refusal
_KNOWN_OTHERS = {
    "flux": "a Flux image model", "sd1": "a Stable Diffusion 1.x model", "sdxl": "a Stable Diffusion XL model",
    "sd3": "a Stable Diffusion 3 model", "aura": "an AuraFlow model", "ltxv": "an LTX-Video model",
    "hyvid": "a HunyuanVideo model", "cosmos": "a Cosmos model", "lumina2": "a Lumina 2 model",
    "hidream": "a HiDream model", "qwen_image": "a Qwen-Image model", "chroma": "a Chroma model",
    "t5": "a T5 text encoder", "t5encoder": "a T5/umT5 text encoder", "clip": "a CLIP model",
}
_LLMS = ("llama", "qwen", "gemma", "mistral", "phi", "gpt", "falcon", "mamba", "bert", "deepseek", "command-r",
         "starcoder", "internlm", "baichuan", "olmo", "granite", "chatglm", "bloom", "mpt", "stablelm")
# keys only a Wan DiT has (community files without an architecture are recognised by them)
_WAN_KEYS = ("blocks.0.self_attn.norm_q.weight", "text_embedding.2.weight", "head.modulation")
ORIG_SHAPE = "comfy.gguf.orig_shape."
TEXT_LEN_FIELD = "wancore.text_len"  # written by wan_core.quant.gguf_writer when the source records one


class GGUFFormatError(ValueError):
    """A GGUF file that cannot be used; the message names the file and the problem."""


def describe_architecture(arch: str) -> str:
    """What a GGUF's ``general.architecture`` says the file is (for refusals)."""
    if arch in _KNOWN_OTHERS:
        return _KNOWN_OTHERS[arch]
    if any(arch.startswith(p) for p in _LLMS):
        return "a language model (LLM)"
    return f"a GGUF of architecture {arch!r}"


def _field_value(field) -> Any:
    """A scalar, string or array value of a ``gguf`` ReaderField."""
    parts = [field.parts[i] for i in field.data]
    if field.types and field.types[0].name == "STRING" and len(field.types) == 1:
        return bytes(parts[0]).decode("utf-8", errors="replace")
    values = [p.tolist()[0] if hasattr(p, "tolist") else p for p in parts]
    return values if len(field.types) > 1 or len(values) != 1 else values[0]


def _open(path: str):
    try:
        import gguf
    except ImportError:
        raise GGUFFormatError(f"{path}: reading GGUF files needs the gguf package: pip install gguf "
                              f"(or pip install comfyui-wancore[gguf])") from None
    try:
        return gguf.GGUFReader(path)
    except ValueError as e:
        if "is not a valid GGMLQuantizationType" in str(e):
            raise GGUFFormatError(f"{path}: a tensor has a quantization type unknown to the gguf package ({e}); "
                                  f"supported: {', '.join(BLOCK_TYPES)}") from e
        raise GGUFFormatError(f"{path}: not a readable GGUF file ({os.path.getsize(path)} bytes; truncated or "
                              f"corrupt? download it again): {e}") from e
    except (OSError, IndexError, TypeError, KeyError) as e:  # numpy / struct errors on a cut or damaged file
        raise GGUFFormatError(f"{path}: not a readable GGUF file ({os.path.getsize(path)} bytes; truncated or "
                              f"corrupt? download it again): {type(e).__name__}: {e}") from e


class GGUFFile:
    """One GGUF file: ``keys()``, ``shape`` (torch order), ``dtype``, ``get`` (a float tensor, quantised data
    dequantised to float32), ``qtype`` and ``blocks`` (the raw uint8 rows). ``tensor_bytes``: the data bytes."""

    def __init__(self, path: str):
        self.path = path
        reader = _open(path)
        self.fields = {name: _field_value(f) for name, f in reader.fields.items() if not name.startswith("GGUF.")}
        self.architecture: str | None = self.fields.get("general.architecture")
        self._map = reader.data  # numpy memmap of the whole file
        self._tensors = {t.name: t for t in reader.tensors}
        self._check_architecture()
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
        size = os.path.getsize(path)
        if size < end:
            raise GGUFFormatError(f"{path}: truncated GGUF file: {size} bytes, but its tensors end at byte {end}; "
                                  f"download it again")
        self.tensor_bytes = sum(int(t.n_bytes) for t in reader.tensors)
        self._types: dict[str, str] = {}
        for name, t in self._tensors.items():
            block_type = BY_ID.get(int(t.tensor_type))
            if block_type is None:
                raise GGUFFormatError(f"{path}: tensor {name} is {t.tensor_type.name}, a quantization type WanCore "
                                      f"cannot dequantize (supported: {', '.join(BLOCK_TYPES)})")
            self._types[name] = block_type.name
        self._shapes = {name: self._shape(name) for name in self._tensors}
        self.metadata = {"gguf_architecture": self.architecture}
        if TEXT_LEN_FIELD in self.fields:  # a DiT whose text length is not Wan's 512 (the built-in demo: 32)
            self.metadata["wan_text_len"] = str(self.fields[TEXT_LEN_FIELD])

    def _check_architecture(self) -> None:
        arch = self.architecture
        if arch is None or arch in WAN_ARCHITECTURES or any(k in self._tensors for k in _WAN_KEYS):
            return
        raise GGUFFormatError(f"{self.path}: {describe_architecture(str(arch))} (GGUF general.architecture = "
                              f"{arch!r}), not a Wan diffusion model")

    def _shape(self, name: str) -> tuple[int, ...]:
        t = self._tensors[name]
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        orig = self.fields.get(ORIG_SHAPE + name)
        if orig is not None:
            orig = tuple(int(d) for d in (orig if isinstance(orig, list) else [orig]))
            if int(np.prod(orig)) != int(t.n_elements):
                raise GGUFFormatError(f"{self.path}: {ORIG_SHAPE}{name} = {list(orig)} does not fit the tensor's "
                                      f"{int(t.n_elements)} values")
            return orig
        if name.endswith("modulation") and len(shape) == 2:  # converters drop the leading 1 of [1, n, dim]
            return (1, *shape)
        return shape

    def keys(self) -> list[str]:
        return list(self._tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[name]

    def qtype(self, name: str) -> str:
        return self._types[name]

    def dtype(self, name: str) -> torch.dtype:
        """The stored float dtype; ``torch.uint8`` for quantised tensors (never counted as the model's dtype)."""
        return {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}.get(self._types[name],
                                                                                        torch.uint8)

    def blocks(self, name: str) -> torch.Tensor:
        """The tensor's bytes as uint8 rows of its stored innermost dim ``[n / dims[0], row_bytes]`` (the torch
        ``[N, K]`` of a 2-D weight), copied out of the map."""
        t = self._tensors[name]
        data = t.data
        try:
            with warnings.catch_warnings():  # the map is read-only; the copy below is what is kept
                warnings.simplefilter("ignore", UserWarning)
                raw = torch.from_numpy(np.ascontiguousarray(data).view(np.uint8)).clone()
        except (ValueError, OSError) as e:
            raise GGUFFormatError(f"{self.path}: tensor {name} cannot be read ({e}); truncated or corrupt file?") \
                from e
        self._release(int(t.data_offset), int(t.n_bytes))
        return raw.reshape(int(t.n_elements) // int(t.shape[0]), -1)

    def _release(self, offset: int, size: int) -> None:
        """Drop the map's pages of a copied tensor: counted as this process's memory while mapped, they would
        double the peak of a load (the file plus the copies)."""
        mapped = getattr(self._map, "_mmap", None)
        advise = getattr(mmap, "MADV_DONTNEED", None)
        if mapped is None or advise is None:
            return
        start = offset - offset % mmap.PAGESIZE
        try:
            mapped.madvise(advise, start, offset + size - start)
        except (OSError, ValueError):  # only a memory saving: never fail a load over it
            pass

    def get(self, name: str) -> torch.Tensor:
        """The tensor in its stored float dtype (quantised types: dequantised to float32), torch shape."""
        qtype = self._types[name]
        raw = self.blocks(name)
        if qtype in FLOAT_TYPES:
            return raw.view(self.dtype(name)).reshape(self._shapes[name])
        return dequantize_rows(raw, qtype).reshape(self._shapes[name])
