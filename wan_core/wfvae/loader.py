"""Loading a WF-VAE: the released layouts (a diffusers-style folder with ``config.json`` + safetensors;
``config.json`` + ``merged.ckpt``; a bare training ``.ckpt`` with EMA / ``state_dict`` / ``gen_model`` nesting),
detected from the keys, configured from the weights' shapes. Pickles are read with ``torch.load(weights_only=True)``.
"""
from __future__ import annotations

import json
import os
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import (
    PICKLE_EXTS,
    CheckpointError,
    LazyStateDict,
    Source,
    check_shapes,
    materialize,
    open_checkpoint,
    stored_float_dtype,
)
from ..vae.loader import WanVAE
from ..vae.loader import load_vae as load_wan_vae
from .autoencoder import WFVAE
from .config import config_from_shapes
from .haar import HAAR3D_GAIN
from .model import build_model

# the official wavelet filters (frozen parameters / buffers in full files, absent from EMA ones): constants here
WAVELET_KEY = re.compile(r"(encoder|decoder)\.(inverse_)?wavelet_transform_\w+\.")


def is_wfvae_keys(keys) -> bool:
    keys = set(keys)
    return "encoder.connect_l1.weight" in keys and any(k.startswith("decoder.connect_l2.") for k in keys)


def unwrap_training_checkpoint(obj: Any) -> Any:
    """The official loader's choice: a non-empty ``ema_state_dict`` (``module.`` removed), else
    ``state_dict["gen_model"]``, else ``state_dict``, else the object itself."""
    if not isinstance(obj, Mapping):
        return obj
    ema = obj.get("ema_state_dict")
    if isinstance(ema, Mapping) and ema:
        return {k.replace("module.", "", 1) if k.startswith("module.") else k: v for k, v in ema.items()}
    inner = obj.get("state_dict")
    if isinstance(inner, Mapping):
        gen = inner.get("gen_model")
        return gen if isinstance(gen, Mapping) else inner
    return obj


def read_pickle(path: Path) -> dict[str, torch.Tensor]:
    """A ``.ckpt``/``.pt``/``.pth`` read without running code (tensors and plain containers only)."""
    try:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e).lower():
                raise
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"{path}: refused: it holds Python objects other than tensors and plain containers, and checkpoints "
            f"are only read with torch.load(weights_only=True); save just its state dict (or convert it to "
            f".safetensors) in an environment you trust") from e
    except (EOFError, OSError, RuntimeError) as e:
        why = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: the file is truncated or corrupt ({why})") from e
    sd = unwrap_training_checkpoint(obj)
    if not isinstance(sd, Mapping):
        raise CheckpointError(f"{path}: expected a state dict (name -> tensor), found {type(sd).__name__}")
    return {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)}


def _release_config(folder: Path) -> dict | None:
    f = folder / "config.json"
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{f}: invalid JSON ({e})") from e


class Opened:
    """A WF-VAE state dict found by ``open_wfvae``, with the release's ``config.json`` (or None) and its name."""

    def __init__(self, sd: LazyStateDict, release: dict | None, source: str):
        self.sd, self.release, self.source = sd, release, source


def open_wfvae(src: Source) -> Opened | None:
    """The WF-VAE in ``src``, or None when it is something else (the caller then goes on as before).

    A folder: its ``.ckpt`` (the last, as the official ``from_pretrained``), else its safetensors when its
    ``config.json`` names ``WFVAEModel``; a file: its keys decide; a ``config.json`` beside it is the release's.
    """
    if isinstance(src, Mapping):
        return Opened(open_checkpoint(src), None, "<state dict>") if is_wfvae_keys(src) else None
    path = Path(os.fspath(src)).expanduser()
    if not path.exists():
        return None
    release = _release_config(path if path.is_dir() else path.parent)
    if path.is_dir():
        ckpts = sorted(p for p in path.iterdir() if p.suffix == ".ckpt")
        if not ckpts:
            if (release or {}).get("_class_name") != "WFVAEModel":
                return None
            return Opened(open_checkpoint(path), release, str(path))
        path = ckpts[-1]
    if path.suffix.lower() not in PICKLE_EXTS:
        sd = open_checkpoint(path)
        return Opened(sd, release, str(path)) if is_wfvae_keys(sd) else None
    tensors = read_pickle(path)
    return Opened(open_checkpoint(tensors), release, str(path)) if is_wfvae_keys(tensors) else None


def _drop_wavelets(sd: LazyStateDict, source: str) -> LazyStateDict:
    """The file's wavelet filters must be the official constants (+-0.3536, +-1/2); they are not loaded."""
    for k in (k for k in sd if WAVELET_KEY.match(k)):
        mags = sd[k].float().abs()
        if not bool(((mags - HAAR3D_GAIN).abs() < 1e-4).logical_or((mags - 0.5).abs() < 1e-6).all()):
            raise CheckpointError(f"{source}: {k} is not a Haar filter (+-0.3536 or +-0.5); not a WF-VAE this "
                                  f"code knows")
    return sd.rename(lambda k: None if WAVELET_KEY.match(k) else k)


def load_wfvae(src: Source | Opened, dtype: torch.dtype | None = None, device: torch.device | str = "cpu") -> WFVAE:
    """Load a WF-VAE (``src`` as ``open_wfvae`` takes it, or its result); a partial or mismatched file is
    refused in one line. ``dtype``: None keeps the stored float32/float16/bfloat16."""
    opened = src if isinstance(src, Opened) else open_wfvae(src)
    if opened is None:
        raise CheckpointError(f"{src}: not a WF-VAE (no encoder.connect_l1 / decoder.connect_l2 weights)")
    release, src = opened.release, opened.source
    sd = _drop_wavelets(opened.sd, src)
    shapes = {k: tuple(sd.shape(k)) for k in sd}
    try:
        cfg = config_from_shapes(shapes, src, release)
    except ValueError as e:
        raise CheckpointError(str(e)) from e
    model = build_model(cfg, "meta")
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    check_shapes(shapes, expected, src, f"the WF-VAE layout detected from it ({cfg.name})")
    stored = stored_float_dtype(sd)
    keep = stored if stored in (torch.float32, torch.float16, torch.bfloat16) else torch.float32
    tensors = materialize(sd, dtype=dtype or keep, device=device)
    model.load_state_dict(tensors, strict=True, assign=True)
    model.eval().requires_grad_(False)
    return WFVAE(model, source=src)


def load_vae(src: Source, dtype: torch.dtype | None = None,
             device: torch.device | str = "cpu") -> WanVAE | WFVAE:
    """``wan_core.load_vae``: a WF-VAE (detected from its keys) as a WFVAE, anything else as the Wan VAE loader
    (``wan_core.vae.load_vae``) takes it."""
    opened = open_wfvae(src)
    if opened is not None:
        return load_wfvae(opened, dtype, device)
    return load_wan_vae(src, dtype, device)
