"""--image (and --last-image) of a Wan 2.1 I2V / FLF2V run as the sampler's ``ImageCondition`` (docs/i2v.md)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .errors import UsageError
from .progress import tqdm_progress

if TYPE_CHECKING:
    from .request import GenerateRequest


def encode_image_condition(request: "GenerateRequest", cfg, dit, vae, files, device):
    """--image (and --last-image) -> the ``ImageCondition`` of ``cfg``'s size: the request checked against the DiT
    first, then the CLIP vision encoder loaded, used and released, and the frames VAE-encoded (docs/i2v.md)."""
    import torch

    from ..i2v import check_image_request, image_condition, load_clip_vision, load_image
    from ..memory.offload import move, release

    try:
        image = load_image(request.image)
        last = load_image(request.last_image) if request.last_image else None
        clip_file = (files or {}).get("clip_vision")
        check_image_request(dit, last is not None, clip_file is not None, f"the DiT {Path(str(dit.source)).name}")
    except ValueError as e:
        raise UsageError(str(e)) from None
    clip = None
    if clip_file is not None and dit.config.image_dim:
        clip = load_clip_vision(clip_file.path, dtype=torch.float32 if device.type == "cpu" else torch.bfloat16,
                                device=device)
    rest = vae.device  # where the offload policy keeps the VAE until decoding
    move(vae, device)
    with torch.inference_mode():
        condition = image_condition(vae, image, cfg.width, cfg.height, cfg.frames, last, clip,
                                    tiling=request.tiling, progress=tqdm_progress("encoding image", "chunk"))
    move(vae, rest)
    if clip is not None:
        release(clip.model)  # not needed again in this run
    return condition
