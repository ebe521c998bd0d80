"""The model files of a request (explicit paths win, the rest found in ``--models-dir`` by header; the demo
model's shipped files; nothing for tiny-random) and loading them: the DiT with its dtype and acceleration, the
VAE and the text encoder, each where the offload policy wants it until its stage (docs/memory.md section 3)."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from .errors import UsageError
from .progress import tqdm_progress

if TYPE_CHECKING:
    from .request import GenerateRequest

PART_LABELS = {"dit": "DiT", "vae": "VAE", "text_encoder": "text encoder", "clip_vision": "CLIP vision"}


def model_files(request: "GenerateRequest") -> dict | None:
    """The files the request runs (named on stderr when they come from flags or a folder); None for
    tiny-random."""
    if request.preset == "demo":
        from ..demo.data import untrained_size_note

        note = untrained_size_note(request.width, request.height, request.frames)
        if note:
            print(f"wan_core: {note}", file=sys.stderr)
        return demo_files()
    if request.preset == "tiny-random":
        return None
    files = resolve_models(request)
    for part, f in files.items():
        print(f"wan_core: {PART_LABELS[part]}: {f.path} ({f.what})", file=sys.stderr)
    return files


def resolve_models(request: "GenerateRequest") -> dict:
    """``{"dit": ModelFile, "vae": ..., "text_encoder": ...}``: explicit paths win, the rest is found in
    ``--models-dir`` by header. Reads headers only; raises UsageError (one line) for a wrong or ambiguous file."""
    from .model_files import PARTS, find_model, identify

    found: dict = {}
    image = request.image
    dit_kind = ("dit_flf2v" if request.last_image else "dit_i2v") if image else "dit"
    paths = {"dit": request.dit_file, "vae": request.vae_file, "text_encoder": request.text_encoder,
             "clip_vision": request.clip_vision}
    for part in PARTS + (("clip_vision",) if image else ()):
        explicit = paths[part]
        flag = "--" + part.replace("_", "-")
        kind = dit_kind if part == "dit" else part  # --image: an I2V / FLF2V DiT (docs/i2v.md section 8)
        if explicit:
            f = identify(explicit, kind)
            if not f.ok:
                raise UsageError(f"{flag} {explicit}: {f.problem}")
        elif request.models_dir:
            try:
                f = find_model(request.models_dir, kind)
            except ValueError as e:
                if part == "clip_vision" and not (found.get("dit") and found["dit"].image_dim):
                    continue  # an image-to-video DiT without img_emb (Wan 2.2 layout) needs no CLIP
                raise UsageError(str(e)) from None
        else:
            continue
        found[part] = f
    if image and found.get("dit") and found["dit"].image_dim and "clip_vision" not in found:
        raise UsageError(f"{found['dit'].path.name} (Wan 2.1 image-to-video) needs the CLIP vision encoder: pass "
                         f"--clip-vision clip_vision_h.safetensors (or put it in <models-dir>/clip_vision)")
    missing = ["--" + p.replace("_", "-") for p in PARTS if p not in found]
    if missing:
        raise UsageError(f"missing {', '.join(missing)} (or --models-dir, or --preset tiny-random)")
    return found


def demo_files() -> dict:
    """The built-in demo model's files as ``resolve_models`` describes files (``wan_core.demo.builtin_paths``)."""
    from ..demo import builtin_paths
    from .model_files import identify

    try:
        paths = builtin_paths()
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None
    return {part: identify(paths[part], part) for part in ("dit", "vae", "text_encoder")}


def dit_block_count(files: dict | None) -> int | None:
    """The DiT's block count from its file header (None for the tiny-random preset)."""
    if not files or "dit" not in files:
        return None
    from ..memory import file_block_count

    return file_block_count(files["dit"].path)


def accel(request: "GenerateRequest") -> dict:
    """``load_dit`` acceleration keywords from the flags."""
    return {"attention": request.attention, "skiparse": request.skiparse, "skiparse_k": request.skiparse_k,
            "weights": request.weights, "gemm": request.gemm}


def offload_policy(request: "GenerateRequest"):
    """The --*-offload flags as a ``wan_core.memory.offload.OffloadPolicy``."""
    from ..memory.offload import OffloadPolicy

    return OffloadPolicy(text_encoder=request.text_encoder_offload, vae=request.vae_offload, dit=request.dit_offload)


def load_models(request: "GenerateRequest", device, files: dict | None = None, swapped: int = 0):
    """(dit, vae, text_encoder) for the request; ``files`` from ``resolve_models`` (None: resolve). ``swapped``:
    the DiT blocks that will stream from CPU memory (``placement.swap_blocks``): the DiT then loads on the CPU."""
    import torch

    from .. import load_dit, load_text_encoder, load_vae
    from ..demo import tiny_random_models

    if request.preset == "tiny-random":
        dit, vae, te = tiny_random_models(seed=0, device=device)
        if request.attention != "sdpa" or request.skiparse != "none" or request.weights:
            dit = load_dit(dit.state_dict(), config=dit.config, device=device, **accel(request))
        return dit, vae, te
    files = files or resolve_models(request)
    policy = offload_policy(request)  # where each part waits until its stage (docs/memory.md section 3)
    dit = load_dit(files["dit"].path, dtype=dit_dtype(request, device, files), progress=tqdm_progress("loading DiT"),
                   device="cpu" if swapped else policy.load_device("dit", device), **accel(request))
    vae = load_vae(files["vae"].path, dtype=torch.float32 if device.type == "cpu" else torch.bfloat16,
                   device=policy.load_device("vae", device))
    te = load_text_encoder(files["text_encoder"].path, tokenizer=request.tokenizer,
                           dtype=torch.bfloat16 if device.type == "cuda" else torch.float32,
                           device=policy.load_device("text_encoder", device),
                           progress=tqdm_progress("loading text encoder"))
    return dit, vae, te


def dit_dtype(request: "GenerateRequest", device, files: dict):
    """--dtype as a torch dtype; auto: bf16 on a GPU, as stored on the CPU (None) except fp16 files, upcast."""
    import torch

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if request.dtype != "auto":
        return dtypes[request.dtype]
    if device.type == "cuda":
        return torch.bfloat16
    if device.type == "cpu" and not request.weights:
        from ..checkpoint import stored_float_dtype
        from ..dit.loader import official_state_dict

        if stored_float_dtype(official_state_dict(files["dit"].path)) == torch.float16:
            return torch.float32  # CPUs have no fast fp16 matmul (ComfyUI upcasts too); the demo DiT is stored fp16
    return None
