"""VAE nodes: decode raw latents to IMAGE frames (streamed, optionally tiled) and encode frames to latents, with
the Wan VAE or a WF-VAE (whose LATENTs carry its format's mark: ``wan_core.wfvae.latent_format``)."""
from __future__ import annotations

import torch

from wan_core.numerics import check_finite
from wan_core.pipeline import check_latent
from wan_core.vae.image import image_to_video, video_to_image
from wan_core.wfvae.latent_format import check_latent_for_vae, latent_dict

from . import host
from .declare import Input, NodeSpec, Output

CATEGORY = "WanCore/vae"


def _decode_progress(total_hint: int = 1):
    bar = host.Progress(total_hint, "decoding")

    def progress(done: int, total: int) -> None:
        bar.update(done, total=total)

    return progress, bar


def validate_tiles(tile_size: int | None = 256, overlap: int | None = 64) -> bool | str:
    """Pre-queue check of the decode tiles: the declared ranges (ComfyUI skips its own for inputs a validator
    takes), multiples of 8 pixels, overlap < tile_size. None (a linked input) is checked when the node runs."""
    problems = DECODE.range_problems(tile_size=tile_size, overlap=overlap)
    if not problems and tile_size is not None and overlap is not None and (
            tile_size % 8 or overlap % 8 or overlap >= tile_size):
        problems.append(f"tile_size={tile_size}, overlap={overlap}: both must be multiples of 8 pixels and "
                        f"overlap < tile_size")
    return "; ".join(problems) if problems else True


def decode(vae, samples: dict, tiling: str = "auto", tile_size: int = 256, overlap: int = 64):
    check_latent_for_vae(samples, "samples", vae)
    z = check_latent(samples.get("samples") if isinstance(samples, dict) else None, "samples", vae=vae)
    tiles = validate_tiles(tile_size, overlap)
    if tiles is not True:
        raise ValueError(tiles)
    progress, bar = _decode_progress()
    with host.on_device(vae) as v, torch.inference_mode(), bar:
        sf = v.config.spatial_factor  # 8, or 16 for the Wan 2.2 VAE
        video = v.decode(z.to(v.device, v.dtype), tiling=tiling, tile=tile_size // sf, overlap=overlap // sf,
                         progress=progress, interrupt=host.check_interrupt)
    return (video_to_image(video).to(host.intermediate_device()),)


def encode(vae, image: torch.Tensor, tiling: str = "auto"):
    if not isinstance(image, torch.Tensor) or image.dim() != 4 or image.shape[-1] not in (3, 4):
        raise ValueError(f"image: expected an IMAGE batch [frames, H, W, 3], got "
                         f"{list(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__}")
    check_finite(image, "image", "the frames are corrupt")
    t, tf = image.shape[0], vae.config.temporal_factor  # 4, or 8 for the v1.5 WF-VAE
    if (t - 1) % tf:
        lo = t - (t - 1) % tf
        raise ValueError(f"image: {t} frames; the VAE needs {tf}n+1 frames (e.g. {lo} or {lo + tf}); trim the batch")
    progress, bar = _decode_progress()
    with host.on_device(vae) as v, torch.inference_mode(), bar:
        z = v.encode(image_to_video(image).to(v.device, v.dtype), tiling=tiling, progress=progress,
                     interrupt=host.check_interrupt)
    fmt = getattr(vae, "latent_format", None)  # a WF-VAE's: its LATENT is marked so no Wan DiT takes it
    if fmt is not None:
        return (latent_dict(z.to(host.intermediate_device()), fmt),)
    return ({"samples": z.to(host.intermediate_device()), "downscale_ratio_spacial": vae.config.spatial_factor},)


DECODE = NodeSpec(
    node_id="WanCoreDecode", display_name="WanCore VAE Decode", category=CATEGORY,
    description="Decodes Wan 2.1 latents (ours or ComfyUI's native), or a WF-VAE's, to frames, one latent frame "
                "at a time so memory stays flat in video length; tiling bounds memory in resolution (auto: on "
                "out-of-memory for the Wan VAE, above 256 px tiles for a WF-VAE).",
    inputs=(
        Input("vae", "WANCORE_VAE"),
        Input("samples", "LATENT"),
        Input("tiling", "COMBO", default="auto", options=("auto", "on", "off"),
              tooltip="auto: untiled, tiled if it runs out of memory"),
        Input("tile_size", "INT", default=256, min=64, max=4096, step=8, tooltip="tile size in pixels",
              advanced=True),
        Input("overlap", "INT", default=64, min=0, max=1024, step=8, tooltip="tile overlap in pixels",
              advanced=True),
    ),
    outputs=(Output("IMAGE", "images"),),
    fn=decode,
    validate=validate_tiles,
)

ENCODE = NodeSpec(
    node_id="WanCoreEncode", display_name="WanCore VAE Encode", category=CATEGORY,
    description="Encodes frames (IMAGE, 4n+1 frames, or 8n+1 for the 8x8x8 WF-VAE; sizes multiple of 8) to raw "
                "latents of the VAE (a WF-VAE's are marked: WF-VAE decode only, never a Wan sampler).",
    inputs=(
        Input("vae", "WANCORE_VAE"),
        Input("image", "IMAGE"),
        Input("tiling", "COMBO", default="auto", options=("auto", "on", "off")),
    ),
    outputs=(Output("LATENT", "latent"),),
    fn=encode,
)

NODES = (DECODE, ENCODE)
