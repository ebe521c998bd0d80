"""Command-line pieces for Wan 2.2 (docs/wan22.md section 6): ``--dit-high/--dit-low`` (the two A14B experts),
``--boundary``, ``--guidance-low``, ``--lora-high/--lora-low``, LoRA and block swap per expert, and the official
defaults of T2V-A14B, I2V-A14B (with ``--image``) and TI2V-5B. ``__main__`` calls these at
fixed points; nothing here imports torch at parse time."""
from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..variants import I2V_A14B, T2V_A14B, TI2V_5B, SamplingDefaults

A14B_DEFAULTS = {"steps": T2V_A14B.steps, "shift": T2V_A14B.shift, "guidance": T2V_A14B.guidance,
                 "fps": T2V_A14B.fps}
I2V_A14B_DEFAULTS = {"steps": I2V_A14B.steps, "shift": I2V_A14B.shift, "guidance": I2V_A14B.guidance,
                     "fps": I2V_A14B.fps}
TI2V_DEFAULTS = {"width": TI2V_5B.width, "height": TI2V_5B.height, "frames": TI2V_5B.frames,
                 "steps": TI2V_5B.steps, "guidance": TI2V_5B.guidance, "shift": TI2V_5B.shift,
                 "fps": TI2V_5B.fps}


def add_arguments(group) -> None:
    group.add_argument("--dit-high", help="Wan 2.2 A14B high-noise expert (file or diffusers folder), with --dit-low: "
                                          "one model switching experts inside the run (docs/wan22.md)")
    group.add_argument("--dit-low", help="Wan 2.2 A14B low-noise expert (file or diffusers folder)")
    group.add_argument("--boundary", type=float, default=None,
                       help="A14B: the low-noise expert takes over below timestep boundary x 1000 (T2V 0.875, "
                            "I2V 0.9)")
    group.add_argument("--guidance-low", type=float, default=None,
                       help="A14B: guidance of the low-noise expert; --guidance is the high-noise one's "
                            "(official T2V 3.0 / 4.0)")
    for name in ("high", "low"):
        group.add_argument(f"--lora-{name}", action="append", default=[], metavar="FILE[:STRENGTH]",
                           help=f"A14B: a LoRA for the {name}-noise expert only (repeatable; --lora goes to both "
                                f"experts), e.g. the {name}_noise file of a Wan 2.2 LoRA pair")


def is_moe(args) -> bool:
    return bool(getattr(args, "dit_high", None) or getattr(args, "dit_low", None))


def a14b_settings(args) -> SamplingDefaults:
    """The official settings of the experts' model: I2V-A14B with --image (boundary 0.9, shift 5, guidance
    3.5 / 3.5), else T2V-A14B (0.875, shift 12, 4.0 / 3.0); ``wan_core.variants`` cites the configs."""
    return I2V_A14B if getattr(args, "image", None) else T2V_A14B


def _dit_channels(path: str | None) -> int | None:
    if not path or not Path(path).expanduser().exists():
        return None
    from .model_files import identify

    f = identify(Path(path).expanduser(), "dit")
    return f.channels if f.ok else None


def defaults(args, base: Mapping[str, object]) -> dict[str, object]:
    """``base`` with the official Wan 2.2 values for A14B experts (40 steps, shift 12, guidance 4 / 3; with --image
    I2V-A14B: shift 5, guidance 3.5 / 3.5) or a
    TI2V-5B DiT (1280x704, 121 frames at 24 fps, 50 steps, shift 5, guidance 5); unset flags take them."""
    if is_moe(args):
        return {**base, **(I2V_A14B_DEFAULTS if getattr(args, "image", None) else A14B_DEFAULTS)}
    if _dit_channels(getattr(args, "dit", None)) == 48:
        return {**base, **TI2V_DEFAULTS}
    return dict(base)


def problems(args) -> list[str]:
    """Wan 2.2 flag problems, each one line naming the flags and the valid choices."""
    out = []
    if not is_moe(args):
        for flag in ("boundary", "guidance_low"):
            if getattr(args, flag, None) is not None:
                out.append(f"--{flag.replace('_', '-')} applies to the two A14B experts: give --dit-high and "
                           f"--dit-low")
        for flag in sorted({flag for flag, _spec in expert_loras(args)}):
            out.append(f"{flag} applies to one of the two A14B experts: give --dit-high and --dit-low (--lora for "
                       f"one DiT)")
        return out
    if not (args.dit_high and args.dit_low):
        out.append("--dit-high and --dit-low go together (the two experts of one Wan 2.2 A14B model)")
    if args.dit:
        out.append("--dit with --dit-high/--dit-low: give the two experts only")
    if args.preset is not None:
        out.append(f"--preset {args.preset} brings its own model: drop --dit-high/--dit-low or the preset")
    for flag in ("dit_high", "dit_low"):
        value = getattr(args, flag)
        if value and not Path(value).expanduser().exists():
            out.append(f"--{flag.replace('_', '-')} {value}: no such file or folder")
    if args.boundary is not None and not 0.0 < args.boundary < 1.0:
        out.append(f"--boundary {args.boundary}: must lie between 0 and 1 (T2V 0.875, I2V 0.9)")
    low = a14b_settings(args).guidance_low if args.guidance_low is None else args.guidance_low
    if not math.isfinite(low) or low < 0:
        out.append(f"--guidance-low {low}: must be a finite number >= 0")
    elif (args.guidance == 1.0) != (low == 1.0):
        out.append(f"--guidance {args.guidance} with --guidance-low {low}: both experts with guidance 1, or "
                   f"neither (the negative prompt is encoded once for both)")
    if getattr(args, "image", None) and getattr(args, "last_image", None):
        out.append("--last-image with --dit-high/--dit-low: Wan 2.2 I2V-A14B takes a start image only (drop "
                   "--last-image)")
    if getattr(args, "nag_scale", 1.0) not in (None, 1.0):
        out.append("--nag-scale with --dit-high/--dit-low is not supported yet")
    return out


def prepare_files(args) -> None:
    """Before the model files are resolved: the high-noise expert stands for the DiT (its header is what the
    file checks and the memory estimate read); a TI2V-5B DiT takes the Wan 2.2 VAE from --models-dir."""
    if is_moe(args):
        args.dit = args.dit_high
    elif args.vae is None and args.models_dir and _dit_channels(args.dit) == 48:
        from .model_files import find_model

        try:
            args.vae = str(find_model(args.models_dir, "vae", channels=48).path)
        except ValueError:
            pass  # resolve_models names what is missing


def with_low_noise_expert(args, dit, accel: dict):
    """``dit`` (the high-noise expert) and the --dit-low file as one ``WanMoE``; the low-noise expert waits on the
    CPU when sampling runs on a GPU (moved at the switch, the high-noise one moved out)."""
    if not is_moe(args):
        return dit
    from .. import load_dit
    from .model_files import identify
    from ..dit.moe import WanMoE

    print(f"wan_core: low-noise expert: {args.dit_low} ({identify(Path(args.dit_low).expanduser(), 'dit').what})",
          file=sys.stderr)
    on_gpu = dit.device.type == "cuda"
    low = load_dit(Path(args.dit_low).expanduser(), dtype=dit.dtype, device="cpu" if on_gpu else dit.device, **accel)
    official = a14b_settings(args)  # I2V-A14B with --image, else T2V-A14B
    guidance = (args.guidance, official.guidance_low if args.guidance_low is None else args.guidance_low)
    boundary = official.boundary if args.boundary is None else args.boundary
    return WanMoE(dit, low, boundary=boundary, guidance=guidance, offload_device="cpu" if on_gpu else None)


def expert_loras(args) -> list[tuple[str, str]]:
    """``(flag, spec)`` of --lora-high / --lora-low, in that order."""
    return [(f"--lora-{name}", spec) for name in ("high", "low") for spec in getattr(args, f"lora_{name}", None) or []]


def lora_targets(args, dit) -> list[tuple[str, str, Any]]:
    """``(spec, label, model)`` in the order they are applied: every --lora on the DiT (on each expert of a
    ``WanMoE``), then each --lora-high on the high-noise expert and each --lora-low on the low-noise one."""
    out = [(spec, label, model) for spec in args.lora for label, model in experts(dit)]
    for flag, spec in expert_loras(args):
        name = flag.rsplit("-", 1)[1]
        out.append((spec, f"{name}-noise expert: ", dit.expert(name)))
    return out


def experts(dit) -> list[tuple[str, Any]]:
    """``[("", dit)]``, or ``[("high-noise expert: ", high), ("low-noise expert: ", low)]`` for a ``WanMoE``: what
    --lora patches (each expert gets every LoRA, docs/wan22.md section 6)."""
    from ..dit.moe import is_moe as model_is_moe

    if not model_is_moe(dit):
        return [("", dit)]
    return [("high-noise expert: ", dit.high_noise), ("low-noise expert: ", dit.low_noise)]


def swap_experts(moe, blocks_to_swap: int, prefetch: int, device) -> list:
    """Block swap (``wan_core.memory.enable_block_swap``) on each expert of ``moe``: the last ``blocks_to_swap``
    blocks of each in (pinned) CPU memory, streamed to ``device``. With ``moe.offload_device`` set, only the
    high-noise expert's resident parts go to ``device`` now; the low-noise expert's follow at the switch
    (``WanMoE.activate`` moves resident parts only). Returns the two ``BlockSwap`` objects (high, low)."""
    from ..memory import enable_block_swap

    swaps = []
    for name in ("high", "low"):
        expert = moe.expert(name)
        swaps.append(enable_block_swap(expert, min(blocks_to_swap, len(expert.blocks)), prefetch, device=device,
                                       place_resident=name == "high" or moe.offload_device is None))
    return swaps


def prepare_dit(args, dit, device, prepare: Callable) -> None:
    """``prepare(args, dit, device)`` (``__main__.prepare_dit``) on a plain DiT. A ``WanMoE``: block swap on each
    expert (--blocks-to-swap on a GPU) or the high-noise expert moved in (the low-noise one waits on the CPU
    when ``offload_device`` is set), then --compile-blocks on both."""
    from ..memory import compile_blocks
    from ..memory.offload import move
    from ..dit.moe import is_moe as model_is_moe

    if not model_is_moe(dit):
        prepare(args, dit, device)
        return
    if args.blocks_to_swap and device.type == "cuda":
        for label, swap in zip(("high", "low"), swap_experts(dit, args.blocks_to_swap, args.prefetch, device)):
            print(f"wan_core: {label}-noise expert: {swap} ({swap.offload_bytes() / 2**30:.2f} GiB of blocks in "
                  f"pinned RAM)", file=sys.stderr)
    else:
        move(dit.high_noise if dit.offload_device is not None else dit, device)
    if args.compile_blocks:
        for expert in (dit.high_noise, dit.low_noise):
            compile_blocks(expert, device=device)  # a CompileUnavailableWarning says why not, in one line


def claim_ti2v_image(args) -> None:
    """--image with a TI2V-5B DiT (48 channels) is the TI2V first frame, not the Wan 2.1 I2V conditioning: it moves
    to ``args.ti2v_image`` before the I2V checks see it (docs/wan22.md section 6)."""
    args.ti2v_image = None
    if getattr(args, "image", None) and not getattr(args, "last_image", None) and _dit_channels(args.dit) == 48:
        args.ti2v_image, args.image = args.image, None


def first_frame(args, cfg, vae, device):
    """The --image of a TI2V-5B run as its raw first-frame latent ``[1, 48, 1, H/16, W/16]`` (resized to the
    video's size, bicubic, no crop; the VAE moved to ``device`` for it and back), or None."""
    path = getattr(args, "ti2v_image", None)
    if not path:
        return None
    import torch

    from ..i2v import load_image, resize_image
    from ..memory.offload import move

    frame = resize_image(load_image(path), cfg.width, cfg.height)  # [1, 3, H, W] in [-1, 1]
    rest = vae.device  # where the offload policy keeps the VAE until decoding
    move(vae, device)
    with torch.inference_mode():
        z = vae.encode(frame.unsqueeze(2).to(vae.device, vae.dtype), tiling=getattr(args, "tiling", "auto"))
    move(vae, rest)
    print(f"wan_core: --image {path}: TI2V first frame at {cfg.width}x{cfg.height}", file=sys.stderr)
    return z.float()
