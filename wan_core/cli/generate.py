"""``python -m wan_core generate``: one request run from the model files to the written video, in order: the
sampling settings, the device (one per torchrun rank), the model files, the block swap and memory checked
before loading, loading, text encoding, sampling, decoding and writing. Every choice was made in the request
(``wan_core.cli.request``); this module only carries it out."""
from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from . import conditioning, extend, loras, models, parallel, placement, vace, wan22
from .metadata import output_metadata
from .progress import tqdm_progress
from .request import generation_config

if TYPE_CHECKING:
    from .request import GenerateRequest


def generate(request: "GenerateRequest") -> int:
    """Generates and writes the video of ``request``; 0 on success (the exit code)."""
    cfg = generation_config(request)
    rank, device = parallel.setup(placement.device_of(request.device))  # torchrun: join the group, one GPU a rank
    files = models.model_files(request)
    layers = models.dit_block_count(files)
    swapped = placement.swap_blocks(request, device, layers)  # the one decision; read below, applied in place_dit
    placement.check_memory(request, device, files["dit"].size if files else None, layers, swapped)
    t0 = time.perf_counter()
    if request.chained:  # --extend / --clips: clips that continue a video (one process)
        video, memory = extend.render(request, cfg, files, device, swapped,
                                      lambda: _load(request, device, files, swapped))
    else:
        video, memory = _render(request, cfg, files, device, rank, swapped)
    if rank == 0:
        for line in memory:
            print(f"wan_core: {line}", file=sys.stderr)
    writer = parallel.is_writer()  # torchrun: only rank 0 writes the video
    parallel.finish()
    if writer:
        _write(request, cfg, video, files, t0)
    return 0


def _load(request: "GenerateRequest", device, files: dict | None, swapped: int):
    """(dit, vae, text_encoder), the DiT with its low-noise expert (--dit-low) and LoRAs, checked together."""
    from ..pipeline import check_models

    dit, vae, te = models.load_models(request, device, files, swapped)
    dit = wan22.with_low_noise_expert(request, dit, models.accel(request))  # --dit-low: a WanMoE
    loras.apply_loras(request, dit)
    if request.preset == "tiny-random":
        print("wan_core: preset tiny-random uses RANDOM weights: the output is noise (it exercises the chain).",
              file=sys.stderr)
    check_models(dit, vae, te)  # before the text encoder runs
    return dit, vae, te


def _render(request: "GenerateRequest", cfg, files: dict | None, device, rank: int, swapped: int):
    """(video ``[1, 3, F, H, W]`` on rank 0, else None; the memory lines of each stage). The models are loaded
    here and released as soon as their stage is over (the offload policy), so nothing outside holds them."""
    import torch
    from tqdm.auto import tqdm

    from ..memory.accounting import MemoryMeter, model_bytes
    from ..memory.offload import move, release
    from ..pipeline import WanPipeline

    dit, vae, te = _load(request, device, files, swapped)
    policy = models.offload_policy(request)
    meter = MemoryMeter(device)  # peak per stage, printed at the end (docs/memory.md section 5)
    pipe = WanPipeline(None, vae, te)
    first_frame = wan22.first_frame(request, cfg, vae, device)  # TI2V-5B --image (docs/wan22.md section 6)
    condition = None  # before the text encoder: a bad image or model pairing fails first
    if request.image:
        condition = conditioning.encode_image_condition(request, cfg, dit, vae, files, device)
    vace_inputs = vace.encode(request, cfg, dit, vae, device)  # VACE: before the text encoder, like the image
    with torch.inference_mode():
        with meter.stage("text encoding", model_bytes(te, device)):
            cond, uncond, travel = pipe.encode_config(cfg, need_negative=request.uses_negative)
            _attach_nag(request, dit, uncond)
        if policy.text_encoder == "release":  # the embeddings are all the sampler needs
            release(te)
            pipe.text_encoder = te = None
        placement.place_dit(request, dit, device, swapped)
        pipe.dit = parallel.wrap(dit, request)
        with meter.stage("sampling", model_bytes(dit, device)):
            with tqdm(total=cfg.steps, desc="sampling", unit="step", disable=rank > 0) as bar:
                latents = pipe.sample_latents(cond, uncond, cfg, callback=lambda i, n, x, x0: bar.update(1),
                                              cache=request.cache, image=condition, first_frame=first_frame,
                                              travel=travel, vace=vace_inputs)
        print(pipe.cache_report.line(), file=sys.stderr)  # "cache <preset>: <computed>/<total> DiT evaluations"
        if policy.dit == "release":
            release(dit)
            pipe.dit = dit = None
        move(vae, device)
        with meter.stage("decoding", model_bytes(vae, device)):
            # torchrun: the VAE's tiles split over the ranks, the video on rank 0 (None on the others)
            video = parallel.decode(pipe, latents, request.tiling, tqdm_progress("decoding", "chunk", leave=True))
    return video, meter.lines()


def _attach_nag(request: "GenerateRequest", dit, uncond):
    """NAG hooks on the DiT for the rest of the run when --nag-scale is not 1 (docs/lora.md section 6)."""
    from ..sampling.nag import NAGAttention

    config = request.nag_config()
    return NAGAttention(dit, uncond, config).__enter__() if config.active else None


def _write(request: "GenerateRequest", cfg, video, files: dict | None, t0: float) -> None:
    from ..sampling import DEFAULT_NEGATIVE_PROMPT
    from .video_io import write_video

    negative = DEFAULT_NEGATIVE_PROMPT if cfg.negative_prompt is None else cfg.negative_prompt
    meta = output_metadata(request, cfg.replace(negative_prompt=negative), files)
    if request.chained:
        meta["extension"] = extend.metadata(request)
    written = write_video(video[0], request.out, fps=request.fps, metadata=meta, overwrite=request.overwrite)
    print(f"wrote {written} ({video.shape[2]} frames, {cfg.width}x{cfg.height}, {request.fps} fps) in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
