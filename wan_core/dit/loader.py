"""``load_dit``: any Wan 2.1 T2V / I2V / FLF2V DiT file users have -> a ready ``WanDiT`` (docs/design.md section 4;
image-to-video: docs/i2v.md).

Accepts official, ComfyUI (optionally ``model.diffusion_model.``-prefixed) and diffusers namings, in
fp32/fp16/bf16/fp8 (plain or "scaled"), as a file, a diffusers folder or a state dict. The model is built on
the ``meta`` device and the checkpoint tensors are assigned, so the weights are read once and never
initialised randomly. The acceleration switches (attention backend, skiparse schedule, FP8 weights and GEMM)
are keyword arguments of ``load_dit``, recorded and checked together as a :class:`ModelOptions`
(``model.load_options``); fp8 weights are kept (or quantised) tensor by tensor, so no full-precision copy of
the model is ever built.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields

import torch
import torch.nn as nn

from ..attention.dispatch import Attention, AttentionDispatch, AttentionOverride
from ..attention.skiparse import SUV_PROFILE, Skiparse, SkiparseMode
from ..checkpoint import (
    FP8_DTYPES, CheckpointError, LazyStateDict, Source, check_fp8_scales, check_shapes, dequantize, describe_keys,
    explaining_out_of_memory, is_quant_aux_key, materialize, nonfinite_error, open_checkpoint, stored_float_dtype,
    strip_prefix, weight_scale_key,
)
from ..config import DiTConfig, detect_dit_config
from ..memory.streaming import releasing_progress
from ..numerics import nonfinite_count
from ..quant.fp8 import FP8Linear, Gemm, Granularity, is_block_linear, quantize_weight
from .gguf_weights import is_gguf, load_gguf_weights
from .keys import DIT_PREFIXES, detect_naming, diffusers_to_official
from .model import WanDiT
from .options import FLOAT_WEIGHTS, ModelOptions, Weights



def official_state_dict(src: Source) -> LazyStateDict:
    """Open ``src`` and present it under official DiT names (prefix stripped, diffusers names mapped)."""
    sd = open_checkpoint(src, subfolder="transformer", gguf=True)
    for prefixes in ((), DIT_PREFIXES):
        view = strip_prefix(sd, prefixes) if prefixes else sd
        naming = detect_naming(view.keys())
        if naming == "official":
            return view
        if naming == "diffusers":
            return view.rename(lambda k: diffusers_to_official(k) or (k if is_quant_aux_key(k) else f"?{k}"))
    raise CheckpointError(
        f"{sd.source}: not a Wan DiT; it looks like {describe_keys(sd.keys())}. "
        f"Pick the Wan diffusion model file (e.g. wan2.1_t2v_1.3B_fp16.safetensors or "
        f"wan2.1_i2v_480p_14B_fp16.safetensors) for this input."
    )


def default_dtype(stored: torch.dtype) -> torch.dtype:
    """Compute dtype when the caller does not choose: the stored one, bf16 for fp8 files."""
    return torch.bfloat16 if stored in FP8_DTYPES else stored


def _refuse_other_forms(attention, unknown: dict) -> None:
    """One way to give the options: keywords. Name the forms load_dit no longer takes, and typos."""
    if isinstance(attention, AttentionDispatch):
        raise TypeError("load_dit: attention takes a backend name (e.g. 'int8'), not an AttentionDispatch; give "
                        "per-block or per-step backends as attention_overrides=[AttentionOverride(...)] and the "
                        "sparse schedule as skiparse=...")
    if "options" in unknown:
        raise TypeError("load_dit: options=ModelOptions(...) is no longer taken; pass the options as keywords, "
                        "e.g. load_dit(src, attention='int8', skiparse='osp13') (or load_dit(src, **vars(opts)))")
    if unknown:
        names = ", ".join(f.name for f in fields(ModelOptions))
        raise TypeError(f"load_dit: unknown option(s) {', '.join(sorted(unknown))}; the options are {names}")


def _weight_dtype(opts: ModelOptions, dtype: torch.dtype | None, sd: LazyStateDict) -> torch.dtype:
    """The dtype of the non-fp8 parameters (the compute dtype)."""
    if dtype is not None and dtype in FP8_DTYPES:
        raise ValueError(f"dtype={dtype} is a storage format; use weights='fp8_scaled' (or 'fp8_e4m3fn') and "
                         f"give the compute dtype (bf16, fp16 or fp32) as dtype")
    if opts.weights in FLOAT_WEIGHTS:
        wanted = FLOAT_WEIGHTS[opts.weights]
        if dtype is not None and dtype != wanted:
            raise ValueError(f"weights={opts.weights!r} conflicts with dtype={dtype}; pass one of them")
        return wanted
    if opts.fp8:
        return dtype or torch.bfloat16
    return dtype or default_dtype(stored_float_dtype(sd))


def _load_fp8(model: WanDiT, sd: LazyStateDict, dtype: torch.dtype, device, opts: ModelOptions,
              progress=None) -> None:
    """Assign ``sd`` to the meta ``model`` with the block Linear layers as ``FP8Linear``, one tensor at a time.

    fp8 weights in the file are kept with their scale (``scale_weight`` | ``weight_scale``; ``scale_input``
    is not used: activations get dynamic per-token scales); full-precision block weights are quantised as
    read; every other tensor is cast (fp8 ones dequantised) to ``dtype``.
    """
    check_fp8_scales(sd)
    linears = {name for name, m in model.named_modules() if type(m) is nn.Linear}
    marker = sd["scaled_fp8"] if "scaled_fp8" in sd else None
    full_precision_mm = marker is not None and marker.numel() == 2  # ComfyUI: "dequantise, then matmul"
    tensors, layers = _read_for_fp8(sd, linears, dtype, device, opts, progress)
    gemm = "upcast" if full_precision_mm else opts.gemm
    for layer, (w8, scale) in layers.items():
        fp8 = FP8Linear.from_quantized(w8, scale, tensors.pop(f"{layer}.bias", None), compute_dtype=dtype,
                                       gemm=gemm)
        parent, _, leaf = layer.rpartition(".")
        setattr(model.get_submodule(parent), leaf, fp8)
    missing, unexpected = model.load_state_dict(tensors, assign=True, strict=False)
    missing = [k for k in missing if k.rpartition(".")[0] not in layers]
    if missing or unexpected:  # check_shapes ran before, so this is a bug, not a bad file
        raise CheckpointError(f"{sd.source}: fp8 assignment left {missing[:5]} missing, {unexpected[:5]} unused")


def _read_for_fp8(sd: LazyStateDict, linears: set[str], dtype: torch.dtype, device, opts: ModelOptions,
                  progress=None) -> tuple[dict[str, torch.Tensor], dict[str, tuple[torch.Tensor, torch.Tensor | None]]]:
    """Read every tensor of ``sd`` once: ``(tensors, layers)``, the other tensors cast to ``dtype`` and the fp8
    weight and scale of each block Linear layer in ``linears`` (kept, or quantised as read). Non-finite values
    are collected over the whole file and raised together."""
    bad: list[tuple[str, int, int, str]] = []

    def check(key: str, t: torch.Tensor) -> None:  # one reduction per tensor (wan_core.numerics)
        count = nonfinite_count(t)
        if count:
            bad.append((key, count, t.numel(), ""))

    tensors: dict[str, torch.Tensor] = {}
    layers: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
    keys = list(sd)
    for i, key in enumerate(keys):
        if progress is not None:
            progress(i, len(keys))
        if is_quant_aux_key(key):
            continue
        t = sd[key]
        layer, _, leaf = key.rpartition(".")
        fp8_layer = leaf == "weight" and layer in linears and is_block_linear(layer)
        if t.dtype in FP8_DTYPES:
            sk = weight_scale_key(sd, key)
            scale = sd[sk].to(device) if sk else None
            if fp8_layer:
                layers[layer] = (t.to(device), scale)
                check(key, layers[layer][0])
                if sk is not None and scale is not None:
                    check(sk, scale)
                continue
            t = dequantize(t.to(device), scale, dtype)
        elif fp8_layer:
            t = t.to(device)
            check(key, t)  # before quantising: the saturating cast would hide an Inf
            layers[layer] = quantize_weight(t, opts.fp8_granularity, opts.weights == "fp8_scaled")
            continue
        elif t.is_floating_point():
            t = t.to(device=device, dtype=dtype)
        else:
            t = t.to(device)
        check(key, t)
        tensors[key] = t
    if bad:
        raise nonfinite_error(sd.source, bad)
    if progress is not None:
        progress(len(keys), len(keys))
    return tensors, layers


def _assign(model: WanDiT, sd: LazyStateDict, dtype: torch.dtype, device, opts: ModelOptions, progress,
            gguf: bool) -> None:
    """Read ``sd`` into the meta ``model``: GGUF blocks kept (docs/gguf.md), fp8 kept or quantised, or plain."""
    if gguf:
        if opts.fp8:
            raise ValueError(f"{sd.source}: a GGUF file is already quantised; weights={opts.weights!r} does not "
                             f"apply (give the compute dtype as dtype)")
        load_gguf_weights(model, sd, dtype, device, progress)
    elif opts.fp8:
        _load_fp8(model, sd, dtype, device, opts, progress)
    else:
        tensors = materialize(sd, dtype, device=device, progress=progress)
        model.load_state_dict(tensors, assign=True, strict=True)


def _detect_config(sd: LazyStateDict, shapes: dict[str, tuple[int, ...]]) -> DiTConfig:
    """The DiT config of a file from its tensor shapes and header (``CheckpointError`` when incomplete)."""
    heads = sd.metadata.get("config", {}).get("num_attention_heads")
    # a VACE model's hinted blocks, where a config.json records them (diffusers and official folders)
    vace_layers = sd.metadata.get("config", {}).get("vace_layers")
    # a safetensors header may record a text length other than Wan's 512 (the built-in demo DiT: 32)
    text_len = int(sd.metadata.get("wan_text_len", 512))
    try:
        return detect_dit_config(shapes, text_len=text_len, num_heads=heads, vace_layers=vace_layers)
    except (KeyError, ValueError) as e:
        raise CheckpointError(f"{sd.source}: incomplete Wan DiT: {e}") from e


def _meta_model(config: DiTConfig, shapes: dict[str, tuple[int, ...]], source: str) -> WanDiT:
    """A ``WanDiT`` of ``config`` on the meta device, after checking the file's tensor ``shapes`` against it."""
    with torch.device("meta"):
        model = WanDiT(config)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    check_shapes(shapes, expected, source,
                 f"the Wan DiT config {config.name} (dim {config.dim}, {config.num_layers} layers)")
    return model


def _loaded_bytes(shapes: dict[str, tuple[int, ...]], dtype: torch.dtype, fp8: bool) -> int:
    """Bytes of the loaded model: block Linear weights one byte each when ``fp8``, everything else ``dtype``."""
    total = 0
    for key, shape in shapes.items():
        one_byte = fp8 and key.endswith(".weight") and is_block_linear(key.rpartition(".")[0])
        total += torch.Size(shape).numel() * (1 if one_byte else dtype.itemsize)
    return total


def load_dit(
    src: Source,
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
    config: DiTConfig | None = None,
    attention: Attention | str = "sdpa",
    *,
    attention_overrides: Sequence[AttentionOverride] = (),
    skiparse: Skiparse = "none",
    skiparse_k: int = 4,
    skiparse_ks: Sequence[int] | None = None,
    skiparse_modes: Sequence[SkiparseMode] | None = None,
    suv_profile: Sequence[int] = SUV_PROFILE,
    suv_stage_blocks: Sequence[int] | None = None,
    skiparse_steps: tuple | None = None,
    weights: Weights | None = None,
    fp8_granularity: Granularity = "tensor",
    gemm: Gemm = "upcast",
    progress: Callable[[int, int], None] | None = None,
    **unknown,
) -> WanDiT:
    """Load a Wan DiT from a file, a diffusers folder or a state dict.

    ``dtype``: weight dtype (None = as stored; fp8 files are dequantised to bf16), or the compute dtype
    when the weights are fp8. ``config``: skip detection (needed only for unusual head counts).
    Acceleration (keywords only, documented on :class:`ModelOptions`): ``attention`` ("sdpa" | "sage" | "int8"
    | "int8_fp8" or a registered name) with ``attention_overrides``, ``skiparse`` ("none" | "osp13" | "suv" |
    "custom") with ``skiparse_k`` / ``skiparse_ks`` / ``skiparse_modes`` / ``suv_profile`` /
    ``suv_stage_blocks`` / ``skiparse_steps``, ``weights`` ("fp32" | "bf16" | "fp16" | "fp8_e4m3fn" |
    "fp8_scaled"), ``fp8_granularity`` and ``gemm`` ("upcast" | "scaled_mm").
    ``progress(done, total)``: called per tensor read (it may raise to stop loading).
    Returns the model in eval mode on ``device``; the options used are ``model.load_options``.
    """
    _refuse_other_forms(attention, unknown)
    progress = releasing_progress(progress)  # freed per-tensor buffers go back: peak RAM ~ model (docs/memory.md)
    opts = ModelOptions(
        attention=attention, attention_overrides=tuple(attention_overrides), skiparse=skiparse,
        skiparse_k=skiparse_k, skiparse_ks=None if skiparse_ks is None else tuple(skiparse_ks),
        skiparse_modes=None if skiparse_modes is None else tuple(skiparse_modes), suv_profile=tuple(suv_profile),
        suv_stage_blocks=None if suv_stage_blocks is None else tuple(suv_stage_blocks),
        skiparse_steps=skiparse_steps, weights=weights, fp8_granularity=fp8_granularity, gemm=gemm,
    )
    sd = official_state_dict(src)
    shapes = {k: sd.shape(k) for k in sd if not is_quant_aux_key(k)}
    if config is None:
        config = _detect_config(sd, shapes)
    dispatch = opts.attention_dispatch(config.num_layers)
    model = _meta_model(config, shapes, sd.source)
    gguf = is_gguf(sd)  # GGUF: compute in bf16 unless told otherwise (as for fp8 files)
    target = torch.bfloat16 if gguf and dtype is None and opts.weights is None else _weight_dtype(opts, dtype, sd)
    with explaining_out_of_memory(sd.source, _loaded_bytes(shapes, target, opts.fp8)):  # sizes and what to do
        _assign(model, sd, target, device, opts, progress, gguf)
    model.attention = dispatch
    model.load_options = opts
    model.source = sd.source  # named in errors that compare it with other files (latent channels)
    return model.eval()
