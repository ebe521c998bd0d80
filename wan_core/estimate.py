"""Cost estimate of one Wan 2.1 text-to-video generation, in pure Python (no torch): latent shape, tokens,
attention FLOPs (dense and skiparse), DiT weight and activation memory, and frame/size validity.

The same arithmetic runs in the browser (``web/wancore_estimate.js``; tests keep the two equal), so the
canvas shows these numbers live on the WanCore empty-latent and sampler nodes before anything is queued.
Shapes follow docs/wan_spec.md section 2 (patch 1x2x2 on the 8x8-compressed latents, text padded to 512 tokens)
and skiparse follows docs/algorithms.md sections 1.1-1.2 (a sparse block costs 1/k of dense on L padded to a multiple of
k^2). Conventions (also in ``estimate``'s docstring):

* FLOPs count multiply-adds as 2. ``attention_*`` = the self-attention matmuls (QK^T and PV, 4*L^2*D per
  block); ``cross_attention_flops`` = the same against the 512 text tokens; ``linear_flops`` = the block
  Linear layers plus patch embedding and head. "Per step" = every DiT forward of one sampling step: two
  forwards under classifier-free guidance (guidance != 1), one otherwise.
* Weight memory: every DiT parameter in the weight dtype; ``fp8`` = the block Linear weights in 1 byte
  (plus one float32 scale per layer), everything else in bf16 (the compute dtype), as ``wan_core.quant``
  keeps them.
* Activation memory: the peak inside one block of one forward (forwards of a step run one after the
  other): float32 residual and normalised input (8*D bytes per token) plus, in the compute dtype, the
  larger of the attention tensors (q, k, v, output, projection: 5*D) and the FFN (2*ffn + D), for every
  token of every sample, plus the embedded text. A fused attention kernel (no L x L matrix) is assumed.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from .variants import VARIANTS, Variant

FIXED: dict[str, Any] = {"in_dim": 16, "out_dim": 16, "text_dim": 4096, "freq_dim": 256, "text_len": 512,
         "patch": (1, 2, 2), "latent_channels": 16, "vae_time": 4, "vae_space": 8}
# Spatial compression of each VAE (as wan_core.latent_format, which needs torch): Wan 2.2's is 16x.
VAE_SPACE = {"wan2.1": 8, "wan2.2": 16}
# The released DiT sizes (docs/wan_spec.md section 1.1; docs/comfyui.md section 7.2); a Wan 2.2 A14B expert is
# the 14B, and the Wan 2.2 TI2V-5B overrides FIXED's latent geometry: 48 channels at 16x (docs/wan22.md section 1).
SIZES = ("1.3B", "14B", "5B")


def _size_row(variant: Variant) -> dict[str, int]:
    """A size's DiT shape from its variant's config, plus what differs from ``FIXED``."""
    config = variant.config
    assert config is not None, variant.name
    row = {"dim": config.dim, "ffn_dim": config.ffn_dim, "num_heads": config.num_heads,
           "num_layers": config.num_layers}
    own = {"in_dim": config.in_dim, "out_dim": config.out_dim, "latent_channels": config.out_dim,
           "vae_space": VAE_SPACE[variant.vae]}
    row.update({key: value for key, value in own.items() if value != FIXED[key]})
    return row


# Each size from the first variant of that size in the table (T2V 1.3B, T2V 14B, TI2V 5B).
MODELS: dict[str, dict[str, int]] = {
    size: _size_row(next(v for v in VARIANTS.values() if v.size == size)) for size in SIZES}
DTYPES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}  # bytes per stored weight
SKIPARSE = ("none", "osp13", "suv", "custom")
SUV_PROFILE = (1, 2, 4, 8, 4, 2, 1)  # Open-Sora Plan v1.5 per-stage ratios (as wan_core.attention.skiparse)
# Accepted generation sizes (inclusive): the empty-latent node declares these as its inputs' min/max and the
# command line checks the same table, so a node and the CLI refuse the same values.
SIZE_LIMITS: dict[str, tuple[int, int]] = {"width": (16, 8192), "height": (16, 8192), "frames": (1, 2001),
                                           "batch_size": (1, 64)}
MAX_STEPS = 1000  # sampling steps a run (and a cache calibration) may have
LORA_STRENGTH_LIMIT = 100.0  # largest |strength| of a LoRA (ComfyUI's own LoRA loader's range)


# ---------------------------------------------------------------- validity

def nearest_valid(value: int, multiple: int, offset: int = 0) -> tuple[int, int]:
    """The valid values ``offset + k * multiple`` just below and just above ``value`` (as the pipeline)."""
    below = max(offset + multiple if offset == 0 else offset, value - (value - offset) % multiple)
    above = below if (value - offset) % multiple == 0 else below + multiple
    return below, above


def spec(model: str, key: str) -> Any:
    """A model's value of ``key``: its own (``MODELS``) or the Wan 2.1 one (``FIXED``)."""
    return MODELS[model].get(key, FIXED[key])


def size_problems(width: int, height: int, frames: int, multiple: int = 16) -> list[str]:
    """One message per invalid value, in the pipeline's order: width and height must be multiples of ``multiple``
    (16; 32 for TI2V-5B), frames 4n+1 (``wan_core.latent_format.video_size_problems`` words the same checks at more
    length)."""
    problems = []
    for name, value in (("width", width), ("height", height)):
        if value < multiple or value % multiple:
            lo, hi = nearest_valid(max(value, 1), multiple)
            problems.append(f"{name}={value}: must be a multiple of {multiple}; nearest valid: {lo} or {hi}")
    if frames < 1 or (frames - 1) % 4:
        lo, hi = nearest_valid(max(frames, 1), 4, 1)
        problems.append(f"frames={frames}: must be 4n+1; nearest valid: {lo} or {hi}")
    return problems


# ---------------------------------------------------------------- skiparse schedules (pure Python mirror)

def suv_stage_blocks(num_layers: int, num_stages: int = 7) -> list[int]:
    """Blocks per SUV stage, a symmetric U (mirror of ``wan_core.attention.skiparse.suv_stage_blocks``)."""
    weights = [2 * (min(i, num_stages - 1 - i) + 1) for i in range(num_stages)]
    unit = 2 if num_layers >= 2 * num_stages else 1
    total = sum(weights)
    sizes = [max(unit, unit * round(w / total * num_layers / unit)) for w in weights]  # round half to even
    sizes[num_stages // 2] += num_layers - sum(sizes)
    if sizes[num_stages // 2] < 1:
        raise ValueError(f"cannot split {num_layers} blocks into {num_stages} SUV stages")
    return sizes


def skiparse_ks(schedule: str, num_layers: int, k: int = 4, ks: Sequence[int] | None = None) -> list[int]:
    """Sparse ratio per block (1 = dense) for ``none`` | ``osp13`` (ratio k, first/last two blocks dense) |
    ``suv`` (the v1.5 U profile) | ``custom`` (``ks`` given)."""
    if schedule == "none":
        return [1] * num_layers
    if schedule == "osp13":
        return [k if 2 <= i < num_layers - 2 else 1 for i in range(num_layers)]
    if schedule == "suv":
        out: list[int] = []
        for size, ratio in zip(suv_stage_blocks(num_layers, len(SUV_PROFILE)), SUV_PROFILE):
            out += [ratio] * size
        return out
    if schedule == "custom":
        if ks is None or len(ks) != num_layers:
            raise ValueError(f"skiparse 'custom' needs one ratio per block ({num_layers})")
        return [int(v) for v in ks]
    raise ValueError(f"unknown skiparse schedule {schedule!r}; choose one of {', '.join(SKIPARSE)}")


# ---------------------------------------------------------------- parameters and memory

def dit_param_counts(model: str) -> dict[str, int]:
    """``total`` DiT parameters and ``block_linear`` (the block Linear weights fp8 applies to)."""
    c = MODELS[model]
    d, f, n = c["dim"], c["ffn_dim"], c["num_layers"]
    pt, ph, pw = FIXED["patch"]
    patch = d * spec(model, "in_dim") * pt * ph * pw + d
    text = FIXED["text_dim"] * d + d + d * d + d
    time = FIXED["freq_dim"] * d + d + d * d + d + d * 6 * d + 6 * d
    block = (6 * d                      # modulation
             + 4 * (d * d + d) + 2 * d  # self-attention q, k, v, o + norm_q, norm_k
             + 2 * d                    # norm3 (affine LayerNorm)
             + 4 * (d * d + d) + 2 * d  # cross-attention
             + d * f + f + f * d + d)   # FFN
    out_dim = spec(model, "out_dim")
    head = 2 * d + d * out_dim * pt * ph * pw + out_dim * pt * ph * pw
    return {"total": patch + text + time + n * block + head,
            "block_linear": n * (8 * d * d + 2 * d * f), "block_linear_layers": n * 10}


def weight_bytes(model: str, dtype: str) -> int:
    """DiT weight memory in bytes for ``dtype`` in fp32 | fp16 | bf16 | fp8."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    p = dit_param_counts(model)
    if dtype != "fp8":
        return p["total"] * DTYPES[dtype]
    return p["block_linear"] + (p["total"] - p["block_linear"]) * 2 + p["block_linear_layers"] * 4


def compute_bytes(dtype: str) -> int:
    """Bytes per activation element: fp32 compute for fp32 weights, else 16-bit (fp8 computes in bf16)."""
    return 4 if dtype == "fp32" else 2


# ---------------------------------------------------------------- the estimate

def _step_flops(model: str, b: int, tokens: int, ks: Sequence[int],
                forwards: int) -> tuple[float, float, float, float]:
    """FLOPs of one sampling step of ``b`` samples of ``tokens`` video tokens, blocks sparse by ``ks``:
    (self-attention dense, self-attention with the schedule, cross-attention, linear layers)."""
    c = MODELS[model]
    d, f, n = c["dim"], c["ffn_dim"], c["num_layers"]
    pt, ph, pw = FIXED["patch"]
    text = FIXED["text_len"]
    dense_block = 4.0 * b * tokens * tokens * d
    sparse = 0.0
    for k in ks:
        if k == 1:
            sparse += dense_block
        else:
            padded = tokens + (k * k - tokens % (k * k)) % (k * k)
            sparse += 4.0 * b * padded * padded * d / k
    attn_dense = forwards * n * dense_block
    attn = forwards * sparse
    cross = forwards * n * 4.0 * b * tokens * text * d
    per_block_linear = 2.0 * b * (tokens * (6 * d * d + 2 * d * f) + text * 2 * d * d)
    embed = 2.0 * b * tokens * d * (spec(model, "in_dim") * pt * ph * pw + spec(model, "out_dim") * pt * ph * pw)
    linear = forwards * (n * per_block_linear + embed)
    return attn_dense, attn, cross, linear


def estimate(width: int = 832, height: int = 480, frames: int = 81, batch_size: int = 1, model: str = "1.3B",
             dtype: str = "bf16", skiparse: str = "none", skiparse_k: int = 4,
             skiparse_custom: Sequence[int] | None = None, steps: int = 30, guidance: float = 5.0) -> dict:
    """Everything the canvas shows for one setting, as a JSON-able dict.

    ``model``: "1.3B" | "14B" | "5B" (Wan 2.2 TI2V: 48 channels at 16x, sizes multiple of 32); ``dtype``: weight
    dtype "fp32" | "fp16" | "bf16" | "fp8"; ``skiparse``:
    schedule "none" | "osp13" (ratio ``skiparse_k``) | "suv" | "custom" (``skiparse_custom`` per block).
    Keys: ``valid``/``problems`` (frames 4n+1, sizes multiple of 16), ``latent_shape`` [B, 16, T, H/8, W/8],
    ``tokens`` (video tokens per sample), ``text_tokens``, ``forwards_per_step``, ``sparse_blocks``,
    ``attention_flops_dense`` / ``attention_flops`` (self-attention per step, dense / with the schedule),
    ``attention_ratio``, ``cross_attention_flops``, ``linear_flops``, ``flops_per_step``, ``flops_total``
    (x steps), ``params``, ``weight_bytes``, ``activation_bytes``, ``peak_bytes`` (weights + activations).
    FLOPs are floats, counts and bytes ints (see the module docstring for what each one counts).
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    n = MODELS[model]["num_layers"]
    space = spec(model, "vae_space")
    problems = size_problems(width, height, frames, 2 * space)
    t_lat = max(frames - 1, 0) // FIXED["vae_time"] + 1
    h_lat, w_lat = height // space, width // space
    pt, ph, pw = FIXED["patch"]
    tokens = (t_lat // pt) * (h_lat // ph) * (w_lat // pw)
    text = FIXED["text_len"]
    b = batch_size
    forwards = 1 if guidance == 1 else 2
    ks = skiparse_ks(skiparse, n, skiparse_k, skiparse_custom)
    attn_dense, attn, cross, linear = _step_flops(model, b, tokens, ks, forwards)
    per_step = attn + cross + linear
    d, f = MODELS[model]["dim"], MODELS[model]["ffn_dim"]
    act = compute_bytes(dtype)
    per_token = 8 * d + act * max(5 * d, 2 * f + d)
    activation = b * (tokens * per_token + text * d * act)
    weights = weight_bytes(model, dtype)
    return {
        "valid": not problems,
        "problems": problems,
        "latent_shape": [b, spec(model, "latent_channels"), t_lat, h_lat, w_lat],
        "tokens": tokens,
        "text_tokens": text,
        "forwards_per_step": forwards,
        "sparse_blocks": sum(1 for k in ks if k > 1),
        "attention_flops_dense": attn_dense,
        "attention_flops": attn,
        "attention_ratio": attn / attn_dense if attn_dense else 1.0,
        "cross_attention_flops": cross,
        "linear_flops": linear,
        "flops_per_step": per_step,
        "flops_total": per_step * steps,
        "params": dit_param_counts(model)["total"],
        "weight_bytes": weights,
        "activation_bytes": activation,
        "peak_bytes": weights + activation,
    }


# ---------------------------------------------------------------- will it fit?

def memory_needs(width: int, height: int, frames: int, batch_size: int = 1, model: str | None = "1.3B",
                 dtype: str = "bf16", guidance: float = 5.0) -> dict[str, int]:
    """Bytes a generation cannot do without, as ints: ``latent`` (the float32 latent), ``video`` (the decoded
    float32 frames, as the pipeline and ComfyUI's IMAGE hold them), ``activations`` and ``weights`` of ``model``'s
    DiT (0 when ``model`` is None, e.g. a test-size model). Lower bounds: caches, the VAE and the text
    encoder come on top."""
    t_lat = (frames - 1) // FIXED["vae_time"] + 1
    channels = spec(model, "latent_channels") if model else FIXED["latent_channels"]
    space = spec(model, "vae_space") if model else FIXED["vae_space"]
    latent = 4 * batch_size * channels * t_lat * (height // space) * (width // space)
    video = 4 * batch_size * 3 * frames * height * width
    if model is None:
        return {"latent": latent, "video": video, "activations": 0, "weights": 0}
    e = estimate(width, height, frames, batch_size, model=model, dtype=dtype, guidance=guidance)
    return {"latent": latent, "video": video, "activations": e["activation_bytes"], "weights": e["weight_bytes"]}


def fit_problem(width: int, height: int, frames: int, batch_size: int = 1, *, compute_bytes: int | None,
                host_bytes: int | None, model: str | None = "1.3B", dtype: str = "bf16") -> str | None:
    """One line when a size cannot fit in memory however it is run, else None; pure arithmetic, no allocation.

    ``compute_bytes``: the memory of the largest device the DiT could run on; ``host_bytes``: the RAM that holds
    latents and decoded frames (None = unknown, not checked). The DiT's activations and weights must fit the
    former, the latent and the decoded video the latter. Call it before allocating anything for the size.
    """
    need = memory_needs(width, height, frames, batch_size, model=model, dtype=dtype)
    size = f"{width}x{height}, {frames} frames" + (f", batch {batch_size}" if batch_size != 1 else "")
    hint = "lower the resolution, the frame count or the batch size"
    dit = need["activations"] + need["weights"]
    if compute_bytes is not None and dit > compute_bytes:
        return (f"{size}: the {model} DiT needs at least {format_size(dit)} (weights and activations of one "
                f"forward) but the largest device here has {format_size(compute_bytes)}; {hint}")
    if host_bytes is not None:
        for what in ("latent", "video"):
            if need[what] > host_bytes:
                name = "the latent alone needs" if what == "latent" else "the decoded frames (float32) alone need"
                return (f"{size}: {name} {format_size(need[what])} but this machine has "
                        f"{format_size(host_bytes)} of RAM; {hint}")
    return None


def format_size(n: float) -> str:
    """Bytes with binary units up to PiB (``format_bytes`` stops at GiB, as the canvas does)."""
    for unit, scale in (("PiB", 1024 ** 5), ("TiB", 1024 ** 4)):
        if n >= scale:
            return f"{_sig3(n / scale)} {unit}"
    return format_bytes(n)


def total_memory(device=None) -> int | None:
    """Total memory in bytes of a torch ``device`` (None or "cpu": the physical RAM; CUDA/XPU: the device's
    own; other accelerators with unified memory: the RAM); None when it cannot be told. Imports torch only for
    accelerator devices, so the rest of this module stays torch-free."""
    kind = getattr(device, "type", None) or str(device or "cpu").split(":")[0]
    if kind in ("cuda", "xpu"):
        import torch

        backend = getattr(torch, kind)
        try:
            return int(backend.get_device_properties(device).total_memory)
        except Exception:  # noqa: BLE001 - an odd device: no check rather than a crash
            return None
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def format_flops(flops: float) -> str:
    """``3.95e14`` -> "395 TFLOP" (3 significant digits)."""
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if flops >= scale:
            return f"{_sig3(flops / scale)} {unit}"
    return f"{_sig3(flops)} FLOP"


def format_bytes(n: float) -> str:
    """Bytes in GiB / MiB with 3 significant digits."""
    for unit, scale in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if n >= scale:
            return f"{_sig3(n / scale)} {unit}"
    return f"{int(n)} B"


def _sig3(x: float) -> str:
    if x >= 100:
        return str(math.floor(x + 0.5))
    if x >= 10:
        return f"{math.floor(x * 10 + 0.5) / 10:.1f}"
    return f"{math.floor(x * 100 + 0.5) / 100:.2f}"


# ---------------------------------------------------------------- context windows (what the canvas draws)

def context_split(frames: int, window: int, overlap: int, schedule: str = "static", anchor: bool = True) -> dict:
    """How context windows of ``window`` real frames overlapping by ``overlap`` real frames split a video of
    ``frames`` real frames, in latent frames, as JSON-able ints.

    ``anchor``: latent frame 0 heads every window (WanCoreContextWindows); False = ComfyUI's own
    WanContextWindowsManual (``standard_static`` / ``batched`` / uniform schedules). Keys: ``latent_frames``,
    ``length`` (latent frames per window), ``overlap`` (latent), ``covers`` (one window holds the video: the
    plain sampler runs), ``windows`` (windows per step; 0 when the schedule picks a new set each step).
    """
    latent = max(frames - 1, 0) // FIXED["vae_time"] + 1
    length = max((window - 1) // FIXED["vae_time"] + 1, 1)
    body = length - 1 if anchor else length
    lat_overlap = min(max((overlap - 1) // FIXED["vae_time"] + 1, 0), max(body - 1, 0))
    out = {"latent_frames": latent, "length": length, "overlap": lat_overlap, "covers": latent <= length,
           "windows": 1}
    if out["covers"]:
        return out
    n = latent - (1 if anchor else 0)
    if schedule in ("static", "standard_static"):
        count, start = 0, 0
        while start < n:  # windows every body - overlap frames, the last one moved back to end on the last frame
            count += 1
            if min(start, n - body) + body >= n:
                break
            start += body - lat_overlap
        out["windows"] = count
    elif schedule == "batched":
        out["windows"] = -(-n // body)
    else:
        out["windows"] = 0
    return out


# ---------------------------------------------------------------- a DiT file's size from its header

DIT_PREFIXES = ("model.diffusion_model.", "diffusion_model.", "model.")
_STORED_DTYPES = {"F8_E4M3": "fp8", "F8_E5M2": "fp8", "BF16": "bf16", "F16": "fp16", "F32": "fp32"}


def dit_summary(tensors: dict[str, tuple[str, Sequence[int]]]) -> dict | None:
    """``{"size": "1.3B" | "14B" | "5B", "dtype": stored weight dtype, "layers", "dim"}`` of a Wan DiT from its
    safetensors header (name -> (dtype code, shape)), or None when it is not a released Wan DiT size. ``dtype``
    is that of the block Linear weights (``fp8`` for fp8-scaled files, whose other tensors stay 16-bit)."""
    for prefix in ("", *DIT_PREFIXES):
        probe = tensors.get(prefix + "blocks.0.ffn.0.weight")
        if probe is not None and prefix + "head.modulation" in tensors:
            break
    else:
        return None
    dim = int(tensors[prefix + "head.modulation"][1][-1])
    ffn_dim = int(probe[1][0])
    layers = 1 + max(int(k[len(prefix):].split(".")[1]) for k in tensors
                     if k.startswith(prefix + "blocks.") and k[len(prefix) + 7:].split(".")[0].isdigit())
    size = next((s for s, row in MODELS.items()
                 if (row["dim"], row["ffn_dim"], row["num_layers"]) == (dim, ffn_dim, layers)), None)
    if size is None:
        return None
    return {"size": size, "dtype": _STORED_DTYPES.get(str(probe[0]).upper(), "bf16"), "layers": layers, "dim": dim}
