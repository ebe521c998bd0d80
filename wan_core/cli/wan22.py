"""Command-line pieces for Wan 2.2 (docs/wan22.md section 6): ``--dit-high/--dit-low`` (the two A14B experts),
``--boundary``, ``--guidance-low``, ``--lora-high/--lora-low``, their checks, the expert pair loaded as one
``WanMoE``, and the TI2V-5B first frame from ``--image``. The official defaults come from ``wan_core.variants``
(resolved in ``wan_core.cli.request``); nothing here imports torch at parse time."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .loras import expert_loras

if TYPE_CHECKING:
    from .request import GenerateRequest


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


def problems(request: "GenerateRequest") -> list[str]:
    """Wan 2.2 flag problems, each one line naming the flags and the valid choices. ``boundary`` and
    ``guidance_low`` are the request's: the official values unless given."""
    if not request.experts:
        return _single_dit_problems(request)
    out = []
    if not (request.dit_high and request.dit_low):
        out.append("--dit-high and --dit-low go together (the two experts of one Wan 2.2 A14B model)")
    if request.dit:
        out.append("--dit with --dit-high/--dit-low: give the two experts only")
    if request.preset is not None:
        out.append(f"--preset {request.preset} brings its own model: drop --dit-high/--dit-low or the preset")
    missing = False
    for flag, value in (("--dit-high", request.dit_high), ("--dit-low", request.dit_low)):
        if value and not Path(value).expanduser().exists():
            out.append(f"{flag} {value}: no such file or folder")
            missing = True
    if request.dit_high and request.dit_low and not missing:
        out += _pair_problems(request.dit_high, request.dit_low)
    if request.boundary is not None and not 0.0 < request.boundary < 1.0:
        out.append(f"--boundary {request.boundary}: must lie between 0 and 1 (T2V 0.875, I2V 0.9)")
    low = request.guidance_low
    if low is None or not math.isfinite(low) or low < 0:
        out.append(f"--guidance-low {low}: must be a finite number >= 0")
    elif (request.guidance == 1.0) != (low == 1.0):
        out.append(f"--guidance {request.guidance} with --guidance-low {low}: both experts with guidance 1, or "
                   f"neither (the negative prompt is encoded once for both)")
    if request.image and request.last_image:
        out.append("--last-image with --dit-high/--dit-low: Wan 2.2 I2V-A14B takes a start image only (drop "
                   "--last-image)")
    if request.nag_scale not in (None, 1.0):
        out.append("--nag-scale with --dit-high/--dit-low is not supported yet")
    return out


def _pair_problems(high: str, low: str) -> list[str]:
    """Experts given the wrong way round (their names say which is which) or not of one model (their headers'
    shapes): both found before either is loaded."""
    from ..dit.moe import experts_problem
    from .model_files import expert_from_name

    named = (expert_from_name(high), expert_from_name(low))
    if named == ("low", "high"):
        return [f"--dit-high {high} is the low-noise expert and --dit-low {low} the high-noise one (by their "
                f"names): swap them"]
    for flag, value, want, said in (("--dit-high", high, "high", named[0]), ("--dit-low", low, "low", named[1])):
        if said is not None and said != want:
            return [f"{flag} {value} is named as the {said}-noise expert; give the {want}-noise expert to {flag}"]
    problem = experts_problem(_header_config(high), _header_config(low), Path(high).name, Path(low).name)
    return [problem] if problem else []


def _header_config(path: str):
    """A DiT's config from its header alone, or None when it cannot be read (loading reports that)."""
    from ..checkpoint import is_quant_aux_key
    from ..config import detect_dit_config
    from ..dit.loader import official_state_dict

    try:
        sd = official_state_dict(Path(path).expanduser())
        return detect_dit_config({k: sd.shape(k) for k in sd if not is_quant_aux_key(k)})
    except Exception:  # unreadable or not a DiT: loading names the problem in its own words
        return None


def _single_dit_problems(request: "GenerateRequest") -> list[str]:
    out = []
    for flag, value in (("--boundary", request.boundary), ("--guidance-low", request.guidance_low)):
        if value is not None:
            out.append(f"{flag} applies to the two A14B experts: give --dit-high and --dit-low")
    for flag in sorted({flag for flag, _spec in expert_loras(request)}):
        out.append(f"{flag} applies to one of the two A14B experts: give --dit-high and --dit-low (--lora for "
                   f"one DiT)")
    return out


def with_low_noise_expert(request: "GenerateRequest", dit, accel: dict):
    """``dit`` (the high-noise expert) and the --dit-low file as one ``WanMoE``; the low-noise expert waits on the
    CPU when sampling runs on a GPU (moved at the switch, the high-noise one moved out)."""
    if not request.experts:
        return dit
    from .. import load_dit
    from ..dit.moe import WanMoE
    from .model_files import identify

    # the request's checks saw both experts; its defaults filled the boundary and the low-noise guidance
    assert request.dit_low is not None and request.boundary is not None and request.guidance_low is not None
    low_path = Path(request.dit_low).expanduser()
    print(f"wan_core: low-noise expert: {request.dit_low} ({identify(low_path, 'dit').what})", file=sys.stderr)
    on_gpu = dit.device.type == "cuda"
    low = load_dit(low_path, dtype=dit.dtype, device="cpu" if on_gpu else dit.device, **accel)
    return WanMoE(dit, low, boundary=request.boundary, guidance=(request.guidance, request.guidance_low),
                  offload_device="cpu" if on_gpu else None)


def first_frame(request: "GenerateRequest", cfg, vae, device):
    """The --image of a TI2V-5B run as its raw first-frame latent ``[1, 48, 1, H/16, W/16]`` (resized to the
    video's size, bicubic, no crop; the VAE moved to ``device`` for it and back), or None."""
    path = request.ti2v_image
    if not path:
        return None
    import torch

    from ..i2v import load_image, resize_image
    from ..memory.offload import move

    frame = resize_image(load_image(path), cfg.width, cfg.height)  # [1, 3, H, W] in [-1, 1]
    rest = vae.device  # where the offload policy keeps the VAE until decoding
    move(vae, device)
    with torch.inference_mode():
        z = vae.encode(frame.unsqueeze(2).to(vae.device, vae.dtype), tiling=request.tiling)
    move(vae, rest)
    print(f"wan_core: --image {path}: TI2V first frame at {cfg.width}x{cfg.height}", file=sys.stderr)
    return z.float()
