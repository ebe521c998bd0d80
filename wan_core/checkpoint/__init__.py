"""Safe, lazy checkpoint reading: safetensors (through our own header parser, ``safetensors_file``), ``.pth``
(weights_only), diffusers/transformers folders.

Implements docs/wan_spec.md section 5: prefix stripping, fp8 / "scaled fp8" dequantisation, and errors that name
the file and the problem. Model-specific key maps live beside each model (``dit/keys.py``, ``vae/keys.py``,
``text/keys.py``); this module knows nothing about layer names except how to recognise foreign files.
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Union

import torch

from ..numerics import nonfinite_count
from .gguf_file import GGUFFile, GGUFFormatError
from .safetensors_file import TORCH_DTYPES, SafetensorsFormatError, read_header, read_tensor

FP8_DTYPES = tuple(
    d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) if d is not None
)

# Tensors that only describe quantisation; never model parameters.
_QUANT_SUFFIXES = (".scale_weight", ".weight_scale", ".scale_input", ".input_scale", ".comfy_quant")
_QUANT_MARKERS = ("scaled_fp8",)
_SCALE_SUFFIXES = (".scale_weight", ".weight_scale")

SAFETENSORS_EXTS = (".safetensors", ".sft")
PICKLE_EXTS = (".pth", ".pt", ".ckpt", ".bin")
GGUF_EXT = ".gguf"

Source = Union[str, os.PathLike, Mapping[str, torch.Tensor]]


class CheckpointError(ValueError):
    """A checkpoint could not be used; the message names the file and what is wrong with it."""


class LoadMemoryError(MemoryError):
    """RAM ran out while a checkpoint loaded: the message names the file, the sizes and what to do instead.
    Not a CheckpointError: the file is fine, the machine is too small for this way of loading it."""


_OOM_ADVICE = ("load the weights as fp8 (--weights fp8_e4m3fn, or fp8 weights in the loader node: half the RAM "
               "of fp16/bf16), keep blocks off the GPU with block swap (--blocks-to-swap), close other programs, "
               "or use a smaller file (an fp8 file, or the 1.3B model); the file itself is not at fault")


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is the CPU allocator (or the kernel, for a mapping) refusing memory."""
    text = str(err).lower()
    return isinstance(err, MemoryError) or (isinstance(err, RuntimeError) and (
        "can't allocate memory" in text or "cannot allocate memory" in text or "not enough memory" in text))


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _ram_state() -> str:
    """'RSS of this process, available and total RAM' from /proc (Linux), or '' where unknown."""
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.split()[1:]}
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return ""
    return (f"; this process holds {_gib(rss)}, {_gib(info.get('MemAvailable', 0))} available of "
            f"{_gib(info.get('MemTotal', 0))} RAM + {_gib(info.get('SwapTotal', 0))} swap")


def _source_bytes(source: str) -> int | None:
    path = Path(source)
    try:
        if path.is_file():
            return path.stat().st_size
        if path.is_dir():
            return sum(f.stat().st_size for f in _folder_weight_files(path))
    except (OSError, CheckpointError):
        pass
    return None


def out_of_memory_error(source: str, err: BaseException, doing: str, need: int | None = None) -> LoadMemoryError:
    """The error for running out of RAM while ``doing`` (e.g. "reading tensor 'x' (0.13 GiB)") on ``source``,
    with the file size, the model's size when known (``need`` bytes), the RAM state and what to do."""
    size = _source_bytes(source)
    on_disk = f"{_gib(size)} on disk" if size is not None else "size unknown"
    model = f", the model needs about {_gib(need)} as loaded" if need else ""
    first = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
    return LoadMemoryError(f"{source}: out of memory while {doing} ({on_disk}{model}{_ram_state()}; {first}): "
                           f"{_OOM_ADVICE}")


@contextlib.contextmanager
def explaining_out_of_memory(source: str, need: int | None = None) -> Iterator[None]:
    """Turn an allocation failure inside the block into a ``LoadMemoryError`` about loading ``source``."""
    try:
        yield
    except LoadMemoryError:
        raise
    except (MemoryError, RuntimeError) as e:
        if not is_out_of_memory(e):
            raise
        raise out_of_memory_error(source, e, "loading it", need) from e


class LazyStateDict(Mapping):
    """Read-only ``name -> tensor`` mapping that reads a tensor only when it is accessed.

    ``shape(k)`` and ``dtype(k)`` answer from the file header without reading data, so format and size
    detection never loads a multi-GB file.
    """

    def __init__(self, source: str, names: dict[str, tuple[Any, str]], metadata: dict | None = None):
        # names: public name -> (reader, name inside the reader)
        self.source = source
        self._names = names
        self.metadata = dict(metadata or {})

    # Mapping protocol
    def __getitem__(self, key: str) -> torch.Tensor:
        try:
            reader, inner = self._names[key]
        except KeyError:
            raise KeyError(f"{key!r} not in {self.source}") from None
        return reader.get(inner)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, key: object) -> bool:
        return key in self._names

    def shape(self, key: str) -> tuple[int, ...]:
        reader, inner = self._names[key]
        return reader.shape(inner)

    def dtype(self, key: str) -> torch.dtype:
        reader, inner = self._names[key]
        return reader.dtype(inner)

    def entry(self, key: str) -> tuple[Any, str]:
        """The reader holding ``key`` and its name there (format-specific access, e.g. GGUF blocks)."""
        return self._names[key]

    def rename(self, fn: Callable[[str], str | None]) -> "LazyStateDict":
        """A view with every key passed through ``fn``; keys mapped to None are dropped."""
        names: dict[str, tuple[Any, str]] = {}
        for k, v in self._names.items():
            new = fn(k)
            if new is None:
                continue
            if new in names:
                raise CheckpointError(f"{self.source}: two tensors map to the same name {new!r}")
            names[new] = v
        return LazyStateDict(self.source, names, self.metadata)

    def subset(self, keys) -> "LazyStateDict":
        return LazyStateDict(self.source, {k: self._names[k] for k in keys}, self.metadata)


class _SafetensorsReader:
    """A safetensors file opened by parsing its header (``safetensors_file`` beside this module): never mapped, so
    a file larger than RAM opens, and each tensor is read with plain file reads when asked for (streaming load)."""

    def __init__(self, path: str):
        self.path = path
        try:
            self._header = read_header(path)
        except SafetensorsFormatError as e:
            raise CheckpointError(str(e)) from None
        except OSError as e:
            raise CheckpointError(f"{path}: cannot read the file ({e.strerror or e})") from e
        self.metadata = dict(self._header.metadata)

    def keys(self):
        # in name order, as safe_open gave them: the measured load peak (docs/memory.md) depends on the order
        return sorted(self._header.tensors)

    def get(self, name: str) -> torch.Tensor:
        """The tensor read into its own buffer: unlike reading through a memory map, no page of the file stays
        in the process's resident memory (docs/memory.md, streaming load)."""
        entry = self._header.tensors[name]
        dtype = self.dtype(name)
        try:
            return read_tensor(self.path, entry, dtype)
        except (EOFError, OSError) as e:
            raise CheckpointError(f"{self.path}: cannot read tensor {name!r} ({e}); the file is shorter than its "
                                  f"header says (truncated or changed while loading): download it again") from e
        except (MemoryError, RuntimeError) as e:
            if not is_out_of_memory(e):
                raise
            raise out_of_memory_error(self.path, e, f"reading tensor {name!r} ({_gib(entry.nbytes)})") from e

    def shape(self, name: str) -> tuple[int, ...]:
        return self._header.tensors[name].shape

    def dtype(self, name: str) -> torch.dtype:
        return _safetensors_dtype(self._header.tensors[name].dtype, self.path, name)


class _DictReader:
    def __init__(self, tensors: Mapping[str, torch.Tensor]):
        self._t = tensors

    def keys(self):
        return list(self._t.keys())

    def get(self, name: str) -> torch.Tensor:
        return self._t[name]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._t[name].shape)

    def dtype(self, name: str) -> torch.dtype:
        return self._t[name].dtype


def _safetensors_dtype(code: str, path: str, name: str) -> torch.dtype:
    dt = TORCH_DTYPES.get(code)
    if dt is None:
        raise CheckpointError(f"{path}: tensor {name!r} has dtype {code}, which this torch build cannot read")
    return dt


def _load_pickle_checkpoint(path: str) -> dict[str, torch.Tensor]:
    """``torch.load`` with ``weights_only=True`` only: a checkpoint can never run code on load."""
    if os.path.getsize(path) == 0:
        raise CheckpointError(f"{path}: the file is empty (0 bytes); the download or copy did not complete")
    try:
        try:
            # torch maps the whole file copy-on-write; the kernel may refuse that for a file larger than RAM
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except (RuntimeError, ValueError) as e:
            if "mmap" not in str(e).lower() or is_out_of_memory(e):
                raise  # only the legacy format falls back (reading the whole file into RAM)
            obj = torch.load(path, map_location="cpu", weights_only=True)  # legacy (non-zip) format
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"{path}: refused to load: it contains Python objects other than tensors, and checkpoints are only "
            f"loaded with torch.load(weights_only=True) for safety. Convert it to .safetensors. "
            f"({str(e).strip().splitlines()[-1][:300]})"
        ) from e
    except (MemoryError, RuntimeError) as e:
        if not is_out_of_memory(e):
            raise CheckpointError(f"{path}: the file is truncated or corrupt and cannot be read "
                                  f"({_first_line(e)})") from e
        raise LoadMemoryError(f"{out_of_memory_error(path, e, 'mapping it (torch.load maps a .pth file whole)')} "
                              f"(or convert it to .safetensors, which is read tensor by tensor)") from e
    except (EOFError, zipfile.BadZipFile, OSError) as e:
        raise CheckpointError(f"{path}: the file is truncated or corrupt and cannot be read ({_first_line(e)})") from e
    return _unwrap_state_dict(obj, path)


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__


def _unwrap_state_dict(obj: Any, path: str) -> dict[str, torch.Tensor]:
    # Training checkpoints often nest the weights one level down.
    for _ in range(2):
        if isinstance(obj, Mapping):
            for key in ("state_dict", "model", "module", "ema", "params"):
                inner = obj.get(key)
                if isinstance(inner, Mapping) and any(isinstance(v, torch.Tensor) for v in inner.values()):
                    obj = inner
                    break
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{path}: expected a state dict (name -> tensor), found {type(obj).__name__}")
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise CheckpointError(f"{path}: contains no tensors")
    return tensors


def file_inside(folder: Path, entry: object, source: Path | str) -> Path:
    """``folder / entry`` for a file name read from ``source`` (a shard index, a tokenizer config), refusing
    names that leave ``folder``: absolute paths, ``..``, or a sub-folder that is a link to elsewhere.

    A model folder's JSON is data from whoever published the model; it must not make a server read files
    outside the folder it was given. The file itself may be a link (the Hugging Face cache links every file
    of a snapshot to its blob store), but the directory it sits in must resolve inside ``folder``.
    """
    def refuse(why: str) -> CheckpointError:
        return CheckpointError(f"{source}: refused the entry {entry!r}: {why}; every file it names must be "
                               f"inside {folder}")

    if not isinstance(entry, str) or not entry.strip() or not Path(entry).name:
        raise refuse("not a file name")
    rel = Path(entry)
    if rel.is_absolute() or rel.anchor or Path(entry.replace("\\", "/")).is_absolute():
        raise refuse("an absolute path")
    if ".." in rel.parts or ".." in entry.replace("\\", "/").split("/"):
        raise refuse("it climbs out with '..'")
    path = folder / rel
    if not path.parent.resolve().is_relative_to(folder.resolve()):
        raise refuse("its folder is a link to a place outside the model folder")
    return path


def _shard_files(index: Path, folder: Path) -> list[Path]:
    """The shard files named by a ``*.safetensors.index.json`` ``weight_map``, all inside ``folder``."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = set(weight_map.values())
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{index}: not a valid shard index (needs a 'weight_map'): {e}") from e
    return sorted({file_inside(folder, f, index) for f in sorted(shards, key=str)})


_UNOPENED_TOKENIZER_KEYS = ("special_tokens_map_file", "added_tokens_file", "tokenizer_config_file")


def check_folder_references(folder: str | os.PathLike) -> None:
    """Refuse a model folder whose JSON names files outside it: shard indexes (``*.index.json``) and the
    ``*_file`` entries of ``tokenizer_config.json`` (older transformers open those verbatim). Called before a
    folder is handed to a library that follows those names (transformers' ``from_pretrained``)."""
    folder = Path(folder)
    for index in sorted(folder.glob("*.index.json")):
        _shard_files(index, folder)
    config = folder / "tokenizer_config.json"
    if config.is_file():
        try:
            data = json.loads(config.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return  # not ours to judge; transformers reports a broken config itself
        if isinstance(data, dict):
            for key, value in data.items():
                # the files a tokenizer opens (vocab_file, merges_file, tokenizer_file, ...); stale absolute
                # special_tokens_map_file / added_tokens_file entries are common and never opened from here
                if key.endswith("_file") and key not in _UNOPENED_TOKENIZER_KEYS and value:
                    file_inside(folder, value, config)


def _folder_weight_files(folder: Path) -> list[Path]:
    """The weight files of a diffusers/transformers model folder (sharded via an index, or single)."""
    indexes = sorted(folder.glob("*.safetensors.index.json"))
    if indexes:
        index = indexes[0]
        files = _shard_files(index, folder)
        missing = [f.name for f in files if not f.exists()]
        if missing:
            raise CheckpointError(f"{folder}: shard(s) listed in {index.name} are missing: {', '.join(missing[:5])}")
        return files
    files = sorted(p for p in folder.iterdir() if p.suffix in SAFETENSORS_EXTS)
    if not files:
        files = sorted(p for p in folder.iterdir() if p.suffix in PICKLE_EXTS)
    if not files:
        raise CheckpointError(f"{folder}: no .safetensors (or .bin/.pth) weight files in this folder")
    return files


def open_checkpoint(src: Source, subfolder: str | None = None, gguf: bool = False) -> LazyStateDict:
    """Open a checkpoint lazily.

    ``src``: a ``.safetensors``/``.sft`` file, a ``.pth/.pt/.ckpt/.bin`` file (loaded with
    ``weights_only=True``), a diffusers/transformers model folder (``config.json`` + safetensors, sharded
    with an index or single), a pipeline folder (``subfolder`` picks e.g. ``"transformer"``), or an
    in-memory ``{name: tensor}`` dict. ``gguf``: accept a ``.gguf`` file (DiT loading only; ``gguf_file``).
    """
    if isinstance(src, LazyStateDict):
        return src
    if isinstance(src, Mapping):
        return LazyStateDict("<state dict>", {k: (_DictReader(src), k) for k in src})
    path = Path(os.fspath(src)).expanduser()
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or folder")
    if path.is_dir():
        if subfolder and (path / subfolder).is_dir() and not (path / "config.json").exists():
            path = path / subfolder
        files = _folder_weight_files(path)
        names: dict[str, tuple[Any, str]] = {}
        metadata: dict = {}
        config_file = path / "config.json"
        if config_file.exists():
            try:
                metadata["config"] = json.loads(config_file.read_text())
            except json.JSONDecodeError as e:
                raise CheckpointError(f"{config_file}: invalid JSON ({e})") from e
        for f in files:
            part = open_checkpoint(f)
            for k in part:
                if k in names:
                    raise CheckpointError(f"{path}: tensor {k!r} appears in more than one shard")
                names[k] = part._names[k]
        return LazyStateDict(str(path), names, metadata)
    suffix = path.suffix.lower()
    if suffix in SAFETENSORS_EXTS:
        reader = _SafetensorsReader(str(path))
        return LazyStateDict(str(path), {k: (reader, k) for k in reader.keys()}, reader.metadata)
    if suffix in PICKLE_EXTS:
        tensors = _load_pickle_checkpoint(str(path))
        dict_reader = _DictReader(tensors)
        return LazyStateDict(str(path), {k: (dict_reader, k) for k in tensors})
    if suffix == GGUF_EXT:
        if not gguf:
            raise CheckpointError(
                f"{path}: a GGUF file; GGUF is read only for Wan diffusion models (the DiT loader): VAEs, text "
                f"encoders (the community umT5-XXL GGUF included), CLIP vision models and LoRAs load from "
                f".safetensors or .pth files")
        try:
            gguf_file = GGUFFile(str(path))
        except GGUFFormatError as e:
            raise CheckpointError(str(e)) from e
        return LazyStateDict(str(path), {k: (gguf_file, k) for k in gguf_file.keys()}, gguf_file.metadata)
    raise CheckpointError(
        f"{path}: unknown checkpoint extension {suffix!r}; expected one of "
        f"{', '.join(SAFETENSORS_EXTS + PICKLE_EXTS)} or a model folder"
    )


def strip_prefix(sd: LazyStateDict, prefixes: tuple[str, ...]) -> LazyStateDict:
    """Remove the first of ``prefixes`` shared by the keys that carry one; keys without it are dropped.

    Used on all-in-one files (``model.diffusion_model.`` for the DiT, ``vae.``/``first_stage_model.`` for
    the VAE); when no key carries any prefix the dict is returned unchanged.
    """
    prefix = next((p for p in prefixes if any(k.startswith(p) for k in sd)), None)
    if prefix is None:
        return sd
    n = len(prefix)
    return sd.rename(lambda k: k[n:] if k.startswith(prefix) else None)


def is_quant_aux_key(key: str) -> bool:
    """Tensors that describe fp8 quantisation (scales, markers), not model parameters."""
    return key in _QUANT_MARKERS or key.endswith(_QUANT_SUFFIXES)


def weight_scale_key(sd: Mapping[str, torch.Tensor], weight_key: str) -> str | None:
    """The scale tensor of an fp8 ``<layer>.weight``: legacy ``scale_weight`` or newer ``weight_scale``."""
    if not weight_key.endswith(".weight"):
        return None
    layer = weight_key[: -len(".weight")]
    for cand in (f"{layer}.scale_weight", f"{layer}.weight_scale"):
        if cand in sd:
            return cand
    return None


def missing_fp8_scales(sd: LazyStateDict) -> list[str]:
    """The fp8 tensors of a *scaled* fp8 file that have no scale (empty for plain fp8 and non-fp8 files).

    A file is scaled when it has the ``scaled_fp8`` marker or any ``*.scale_weight`` / ``*.weight_scale``
    tensor; ComfyUI then stores every fp8 weight with its scale (docs/wan_spec.md section 5.4). A missing scale would
    silently be 1: weights off by the scale's inverse (about 3,584x for typical Wan layers).
    """
    if not any(k in _QUANT_MARKERS or k.endswith(_SCALE_SUFFIXES) for k in sd):
        return []
    return [k for k in sd if not is_quant_aux_key(k) and sd.dtype(k) in FP8_DTYPES
            and weight_scale_key(sd, k) is None]


def check_fp8_scales(sd: LazyStateDict) -> None:
    """Refuse a scaled fp8 file in which some fp8 weights lack their scale (see ``missing_fp8_scales``)."""
    missing = missing_fp8_scales(sd)
    if missing:
        raise CheckpointError(
            f"{sd.source}: a scaled fp8 file, but {len(missing)} fp8 weight(s) have no scale tensor "
            f"(<layer>.scale_weight or <layer>.weight_scale), e.g. {', '.join(missing[:4])}; without it the "
            f"weight would be used unscaled (hundreds to thousands of times too large). The file is incomplete "
            f"or was converted wrongly: download or convert it again"
        )


def nonfinite_error(source: str, bad: list[tuple[str, int, int, str]]) -> CheckpointError:
    """The error for tensors found holding NaN/Inf while loading: ``bad`` = (key, count, numel, note)."""
    key, count, numel, note = bad[0]
    others = f"; also {', '.join(b[0] for b in bad[1:4])}" + (" ..." if len(bad) > 4 else "") if bad[1:] else ""
    if note:
        why = f"{note}"
    else:
        why = ("the file is corrupt or was saved from a diverged training run; download it again or use "
               "another file")
    return CheckpointError(
        f"{source}: {len(bad)} tensor(s) hold NaN/Inf values, first {key} ({count} of {numel} values){others}; "
        f"{why}"
    )


def _nonfinite_note(raw: torch.Tensor, loaded: torch.Tensor) -> str:
    """Why a loaded tensor is non-finite when the stored one is not (only called on the error path)."""
    if nonfinite_count(raw):
        return ""
    if raw.dtype in FP8_DTYPES:
        return "the stored fp8 values are finite, so its scale tensor is NaN/Inf or too large: the file is corrupt"
    return (f"the stored {str(raw.dtype).replace('torch.', '')} values are finite but overflow when cast to "
            f"{str(loaded.dtype).replace('torch.', '')}: load it in bfloat16 or float32")


def dequantize(weight: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """fp8 weight * scale, computed in float32 then cast (``scale`` per tensor or per output channel)."""
    w = weight.to(torch.float32)
    if scale is not None:
        s = scale.to(torch.float32)
        if s.numel() > 1:  # per output channel
            s = s.reshape(-1, *([1] * (w.dim() - 1)))
        w = w * s
    return w.to(dtype)


def stored_float_dtype(sd: LazyStateDict) -> torch.dtype:
    """The dtype most parameters are stored in (fp8 files report their fp8 dtype)."""
    counts: dict[torch.dtype, int] = {}
    for k in sd:
        if is_quant_aux_key(k):
            continue
        dt = sd.dtype(k)
        if dt.is_floating_point:
            n = 1
            for s in sd.shape(k):
                n *= s
            counts[dt] = counts.get(dt, 0) + n
    if not counts:
        raise CheckpointError(f"{sd.source}: contains no floating-point tensors")
    return max(counts, key=lambda d: counts[d])


def materialize(
    sd: LazyStateDict,
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
    keep_fp8: bool = False,
    progress: Callable[[int, int], None] | None = None,
    check_finite: bool = True,
) -> dict[str, torch.Tensor]:
    """Read every parameter into a plain dict, dequantising fp8 weights and dropping quantisation aux tensors.

    ``dtype``: cast floating tensors to it (None keeps the stored dtype; fp8 is then dequantised to float32).
    ``keep_fp8``: leave fp8 weights as they are and keep their scales (for the FP8 compute path).
    Dequantised weights equal ``fp8.float() * scale`` exactly when ``dtype`` is float32.
    ``progress(done, total)`` is called after every tensor read (it may raise to stop the load).
    ``check_finite``: every tensor is checked for NaN/Inf as it is read (one reduction per tensor, see
    ``wan_core.numerics``); a CheckpointError names the file, the first bad key and how many are bad.
    A scaled fp8 file with fp8 weights lacking their scale is refused (``check_fp8_scales``).
    """
    out: dict[str, torch.Tensor] = {}
    keys = list(sd)
    if any(sd.dtype(k) in FP8_DTYPES for k in keys if not is_quant_aux_key(k)):
        check_fp8_scales(sd)
    bad: list[tuple[str, int, int, str]] = []
    for i, k in enumerate(keys):
        if progress is not None:
            progress(i, len(keys))
        if is_quant_aux_key(k) and not keep_fp8:
            continue
        raw = t = sd[k]
        if t.dtype in FP8_DTYPES and not keep_fp8:
            sk = weight_scale_key(sd, k)
            t = dequantize(t, sd[sk] if sk else None, dtype or torch.float32)
        elif dtype is not None and t.is_floating_point() and t.dtype not in FP8_DTYPES:
            t = t.to(dtype)
        t = t.to(device) if str(device) != "cpu" else t
        if check_finite:  # after the move: on a GPU the reduction is nearly free and the copy reads the data anyway
            count = nonfinite_count(t)
            if count:
                bad.append((k, count, t.numel(), _nonfinite_note(raw, t)))
        out[k] = t
    if bad:
        raise nonfinite_error(sd.source, bad)
    if progress is not None:
        progress(len(keys), len(keys))
    return out


def check_shapes(
    found: Mapping[str, tuple[int, ...]],
    expected: Mapping[str, tuple[int, ...]],
    source: str,
    what: str,
) -> None:
    """Raise a CheckpointError listing missing keys, unexpected keys and shape mismatches (a few of each)."""
    missing = [k for k in expected if k not in found]
    unexpected = [k for k in found if k not in expected]
    mismatched = [(k, tuple(expected[k]), tuple(found[k])) for k in expected if k in found
                  and tuple(found[k]) != tuple(expected[k])]
    if not (missing or unexpected or mismatched):
        return
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing key(s), e.g. {', '.join(missing[:5])}")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected key(s), e.g. {', '.join(unexpected[:5])}")
    if mismatched:
        desc = "; ".join(f"{k}: expected {list(e)}, found {list(f)}" for k, e, f in mismatched[:5])
        parts.append(f"{len(mismatched)} shape mismatch(es): {desc}")
    raise CheckpointError(f"{source}: does not match {what}: " + " | ".join(parts))


def describe_keys(keys) -> str:
    """A human description of what a state dict looks like, from its key names (for error messages)."""
    keys = list(keys)
    ks = set(keys)

    def has(*subs: str) -> bool:
        return any(all(s in k for s in subs) for k in keys)

    def any_prefix(*prefixes: str) -> bool:
        return any(k.startswith(prefixes) for k in keys)

    if has("lora_A") or has("lora_down") or has("lora_up") or has("lora_B"):
        return "a LoRA (adapter weights, not a full model; load it with a LoRA loader)"
    if has("img_emb.proj") and has("blocks.0.self_attn"):
        return "a Wan 2.1 image-to-video DiT" + (" (first-last-frame)" if has("img_emb.emb_pos") else "")
    if has("head.modulation") and has("blocks.0.self_attn.q"):
        return "a Wan 2.1 DiT"
    if has("condition_embedder.time_proj") and has("blocks.0.attn1.to_q"):
        return "a Wan 2.1 DiT in diffusers format"
    if has("decoder.upsamples.") and has("residual.0.gamma"):
        return "a Wan 2.1 video VAE"
    if has("decoder.up_blocks.") and has("norm1.gamma") and has("quant_conv"):
        return "a Wan 2.1 video VAE in diffusers format"
    if has("encoder.down.0.block.0") or any_prefix("first_stage_model.") and not has("diffusion_model"):
        return "a Stable Diffusion image VAE (2D, not the Wan video VAE)"
    if has("encoder.down_blocks.0.resnets.0.norm1.weight") and has("decoder.up_blocks.0.resnets"):
        return "a Stable Diffusion image VAE in diffusers format (2D, not the Wan video VAE)"
    if has("double_blocks.0.img_attn") or has("single_blocks.0.linear1"):
        return "a Flux (or HunyuanVideo) DiT"
    if has("single_transformer_blocks.0") and has("transformer_blocks.0.attn"):
        return "a Flux DiT in diffusers format"
    if has("joint_blocks.0."):
        return "a Stable Diffusion 3 MMDiT"
    if has("conditioner.embedders.") or has("label_emb.0.0.weight"):
        return "a Stable Diffusion XL checkpoint"
    if has("input_blocks.0.0.weight") or has("down_blocks.0.attentions.0.transformer_blocks"):
        return "a Stable Diffusion 1.x/2.x UNet checkpoint"
    if has("encoder.block.0.layer.0.SelfAttention.q") or ("shared.weight" in ks and has("encoder.final_layer_norm")):
        return "a T5/umT5 text encoder"
    if has("token_embedding.weight") and has("blocks.0.attn.q.weight") and has("ffn.gate.0"):
        return "a Wan umT5 text encoder (official format)"
    if has("text_model.encoder.layers.0") or has("vision_model.encoder.layers.0"):
        return "a CLIP model"
    return "an unknown model (first keys: " + ", ".join(sorted(keys)[:4]) + ")"
