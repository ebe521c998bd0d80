"""Loader nodes: DiT, VAE and text encoder from ComfyUI's model folders (docs/design.md section 5)."""
from __future__ import annotations

from typing import Any

import torch

import wan_core
from wan_core.text.tokenizer import TOKENIZER_FILES

from . import host
from .declare import Input, NodeSpec, Output

CATEGORY = "WanCore/loaders"
# The built-in demo model (wan_core/demo/weights) appears first in each loader's list under this name, so a user
# can run the pack before downloading anything (workflows/t2v_demo).
DEMO_NAME = "wancore-demo (built-in)"
# The demo DiT with its trained VACE branch (docs/demo_model.md, "The VACE branch"): one file written once into the
# user's cache from the two packaged ones, so the DiT loader can list it like any VACE checkpoint.
DEMO_VACE_NAME = "wancore-demo-vace (built-in)"
_DEMO_FOLDERS = {"dit": "diffusion_models", "vae": "vae", "text_encoder": "text_encoders"}


def register_demo_model() -> bool:
    """Offer the packaged demo files in the loaders (``host.register_builtin``); False when not installed."""
    from wan_core.demo import builtin_paths, demo_vace_dit_file

    try:
        paths = builtin_paths()
    except FileNotFoundError:
        return False
    for part, folder in _DEMO_FOLDERS.items():
        host.register_builtin(folder, DEMO_NAME, paths[part])
    try:
        host.register_builtin("diffusion_models", DEMO_VACE_NAME, demo_vace_dit_file())
    except OSError as e:  # a read-only home: everything else still works; say why the entry is missing
        print(f"WanCore: {DEMO_VACE_NAME} not offered: its file could not be written ({e})")
    return True
DTYPES = {"auto": None, "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _dtype_for(choice: str, device: torch.device) -> torch.dtype | None:
    """``auto``: bf16 on accelerators; on CPU the stored dtype (fp16 is upcast to fp32 there, as ComfyUI does)."""
    if choice != "auto":
        return DTYPES[choice]
    return torch.bfloat16 if device.type != "cpu" else torch.float32


def _check_file(folder: str, input_name: str, name: str, opener=None) -> bool | str:
    """Pre-queue check of a model-file input: one of the folder's choices (ComfyUI skips its own combo check
    for inputs a validator takes) that ``opener`` accepts; else a message naming the input, the folder and
    the choices, with paths relative to the models folder."""
    try:
        path = host.model_path(folder, name)
        if opener is not None:
            opener(path)
    except (ValueError, OSError) as e:  # NotInList, CheckpointError, unreadable file
        return host.client_message(f"{input_name}: {e}")
    return True


_UNSET: Any = object()  # validate_model called with the numbers only


def validate_model(model_name: str = _UNSET, blocks_to_swap: int | None = 0,
                   prefetch: int | None = 1) -> bool | str:
    from wan_core.dit.loader import official_state_dict  # safetensors / folders: reads headers only

    problems = MODEL_LOADER.range_problems(blocks_to_swap=blocks_to_swap, prefetch=prefetch)
    if problems:
        return host.client_message("; ".join(problems))
    if model_name is _UNSET:
        return True
    pickled = str(model_name).lower().endswith((".pth", ".pt", ".ckpt", ".bin"))  # would load the whole file
    checked = _check_file("diffusion_models", "model_name", model_name, None if pickled else official_state_dict)
    if checked is not True or not blocks_to_swap:
        return checked
    return _check_swap(model_name, blocks_to_swap, 1 if prefetch is None else prefetch, count_blocks=not pickled)


def _check_swap(model_name: str, blocks_to_swap: int, prefetch: int, count_blocks: bool) -> bool | str:
    """blocks_to_swap / prefetch against the file's block count (from its header) and the device
    (docs/memory.md section 1)."""
    from wan_core.memory import check_swap_options, file_block_count

    try:
        layers = file_block_count(host.model_path("diffusion_models", model_name)) if count_blocks else None
        check_swap_options(blocks_to_swap, prefetch, host.torch_device(), layers)
    except ValueError as e:
        return host.client_message(f"blocks_to_swap: {e}")
    return True


def validate_vae(vae_name: str) -> bool | str:
    return _check_file("vae", "vae_name", vae_name)


def _tokenizer_folder(tokenizer: str):
    """The tokenizer input: empty = the file's own tokenizer; else one of the tokenizer folders (holding
    spiece.model or tokenizer.json) in models/text_encoders, never a path."""
    if not isinstance(tokenizer, str):
        raise host.NotInList(host.not_in_list_message("text_encoders", tokenizer, [], "tokenizer folders"))
    if not tokenizer.strip():
        return None
    return host.model_folder_path("text_encoders", tokenizer.strip(), markers=TOKENIZER_FILES,
                                  what="tokenizer folders")


def validate_text_encoder(text_encoder_name: str, tokenizer: str = "") -> bool | str:
    checked = _check_file("text_encoders", "text_encoder_name", text_encoder_name)
    if checked is not True:
        return checked
    try:
        _tokenizer_folder(tokenizer)
    except ValueError as e:
        return host.client_message(f"tokenizer: {e}")
    return True


WEIGHT_CHOICES = ("auto", "bf16", "fp16", "fp32", "fp8_e4m3fn", "fp8_scaled")
ATTENTION_CHOICES = ("sdpa", "sage", "int8", "int8_fp8")
SKIPARSE_CHOICES = ("none", "osp13", "suv")
GEMM_CHOICES = ("upcast", "scaled_mm")


def _weights_for(path, weight_dtype: str, device: torch.device) -> tuple[torch.dtype | None, str | None]:
    """(dtype, weights) for ``load_dit``: with fp8 weights ``dtype`` is the compute dtype.

    ``auto`` keeps an fp8 file in fp8 (as ComfyUI does) and otherwise uses bf16 on GPU, fp32 on CPU.
    """
    compute = _dtype_for("auto", device)
    if weight_dtype.startswith("fp8"):
        return compute, weight_dtype
    if weight_dtype == "auto":
        from wan_core.checkpoint import FP8_DTYPES, stored_float_dtype
        from wan_core.dit.loader import official_state_dict

        if stored_float_dtype(official_state_dict(path)) in FP8_DTYPES:
            return compute, "fp8_scaled"
    return _dtype_for(weight_dtype, device), None


def load_model(model_name: str, weight_dtype: str = "auto", attention: str = "sdpa", skiparse: str = "none",
               skiparse_k: int = 4, gemm: str = "upcast", device: str = "auto", blocks_to_swap: int = 0,
               prefetch: int = 1, compile_blocks: bool = False):
    from wan_core.memory import check_swap_options, compile_blocks as compile_dit_blocks, enable_block_swap

    path = host.model_path("diffusion_models", model_name)  # only a listed name, even if validation was skipped
    target = host.torch_device() if device == "auto" else torch.device("cpu")
    dtype, weights = _weights_for(path, weight_dtype, target)
    if gemm == "scaled_mm" and weights is None:
        raise ValueError("gemm: scaled_mm needs fp8 weights; choose weight_dtype fp8_scaled or fp8_e4m3fn")
    swap_note = check_swap_options(blocks_to_swap, prefetch, target)  # one-line errors before loading
    progress, bar = host.loading_progress(f"loading {model_name}")
    with bar:
        dit = wan_core.load_dit(path, dtype=dtype, device="cpu", attention=attention, skiparse=skiparse,
                                skiparse_k=skiparse_k, weights=weights, gemm=gemm, progress=progress)
    dit.wancore_device = target  # where the sampler runs it; it rests on the offload device in between
    if blocks_to_swap:
        check_swap_options(blocks_to_swap, prefetch, target, len(dit.blocks))
        if swap_note:
            host.show_text(f"WanCore: {swap_note}")
        else:  # swapped blocks pinned now; the host's model management moves only the rest (host.on_device)
            enable_block_swap(dit, blocks_to_swap, prefetch, device=target, place_resident=False)
    if compile_blocks:
        compile_dit_blocks(dit, device=target)  # a one-line CompileUnavailableWarning when it cannot
    return (dit,)


def load_vae(vae_name: str, dtype: str = "auto"):
    path = host.model_path("vae", vae_name)
    device = host.torch_device()
    vae = wan_core.load_vae(path, dtype=_dtype_for(dtype, device), device="cpu")
    vae.wancore_device = device
    return (vae,)


def load_text_encoder(text_encoder_name: str, tokenizer: str = "", device: str = "default", dtype: str = "auto"):
    path = host.model_path("text_encoders", text_encoder_name)
    tokenizer_folder = _tokenizer_folder(tokenizer)
    target = host.torch_device() if device == "default" else torch.device("cpu")
    progress, bar = host.loading_progress(f"loading {text_encoder_name}")
    with bar:
        te = wan_core.load_text_encoder(path, tokenizer=tokenizer_folder, dtype=_dtype_for(dtype, target),
                                        device="cpu", progress=progress)
    te.wancore_device = target
    return (te,)


MODEL_LOADER = NodeSpec(
    node_id="WanCoreModelLoader", display_name="WanCore Load Diffusion Model", category=CATEGORY,
    description="Loads a Wan DiT (official, ComfyUI or diffusers layout; fp32/fp16/bf16/fp8 and fp8 'scaled' "
                "files) from models/diffusion_models: text-to-video, or image-to-video (Wan 2.1 I2V / FLF2V: "
                "give the sampler a WanCore Image to Video conditioning).",
    inputs=(
        Input("model_name", "COMBO", options=lambda: host.list_models("diffusion_models"),
              tooltip="e.g. wan2.1_t2v_1.3B_fp16.safetensors"),
        Input("weight_dtype", "COMBO", default="auto", options=WEIGHT_CHOICES,
              tooltip="auto: fp8 files stay fp8, others bf16 on GPU / fp32 on CPU; fp8_*: quantise the block "
                      "linears on load (half the memory of bf16)"),
        Input("attention", "COMBO", default="sdpa", options=ATTENTION_CHOICES,
              tooltip="sdpa: PyTorch; sage: SageAttention (CUDA, pip install sageattention; falls back to "
                      "int8/sdpa with a warning); int8: the Sage algorithm in plain torch"),
        Input("skiparse", "COMBO", default="none", options=SKIPARSE_CHOICES, optional=True,
              tooltip="training-free sparse self-attention (Open-Sora Plan): faster, approximates the dense "
                      "model. osp13: dense first/last 2 blocks, single/group skip with ratio k; suv: U-shaped k"),
        Input("skiparse_k", "INT", default=4, min=1, max=16, tooltip="sparse ratio of osp13", advanced=True,
              optional=True),
        Input("gemm", "COMBO", default="upcast", options=GEMM_CHOICES, advanced=True, optional=True,
              tooltip="with fp8 weights: upcast (dequantise per layer) or scaled_mm (FP8 GEMM, SM89+ GPUs)"),
        Input("device", "COMBO", default="auto", options=("auto", "cpu"),
              tooltip="auto: ComfyUI's GPU while sampling, offloaded in between"),
        Input("blocks_to_swap", "INT", default=0, min=0, max=48, optional=True,
              tooltip="keep this many DiT blocks (the last ones) in pinned CPU memory and stream each to the GPU "
                      "just before it runs: same video, less VRAM (30 blocks in 1.3B, 40 in 14B; docs/memory.md)"),
        Input("prefetch", "INT", default=1, min=0, max=8, optional=True, advanced=True,
              tooltip="with blocks_to_swap: blocks copied ahead of the one running (more hides the copies, each "
                      "costs one block of VRAM)"),
        Input("compile_blocks", "BOOLEAN", default=False, optional=True, advanced=True,
              tooltip="torch.compile the transformer blocks (one compile shared by all; the first run is slower; "
                      "needs triton on CUDA)"),
    ),
    outputs=(Output("WANCORE_MODEL", "model"),),
    fn=load_model,
    validate=validate_model,
)

VAE_LOADER = NodeSpec(
    node_id="WanCoreVAELoader", display_name="WanCore Load VAE", category=CATEGORY,
    description="Loads the Wan 2.1 video VAE (Wan2.1_VAE.pth, wan_2.1_vae.safetensors or a diffusers folder), "
                "or Open-Sora Plan's WF-VAE (4x8x8 or v1.5 8x8x8: .ckpt, safetensors or a folder with config.json) "
                "for encode/decode.",
    inputs=(
        Input("vae_name", "COMBO", options=lambda: host.list_models("vae"), tooltip="e.g. wan_2.1_vae.safetensors"),
        Input("dtype", "COMBO", default="auto", options=tuple(DTYPES)),
    ),
    outputs=(Output("WANCORE_VAE", "vae"),),
    fn=load_vae,
    validate=validate_vae,
)

TEXT_ENCODER_LOADER = NodeSpec(
    node_id="WanCoreTextEncoderLoader", display_name="WanCore Load Text Encoder", category=CATEGORY,
    description="Loads the umT5-XXL text encoder (ComfyUI umt5_xxl_*.safetensors with embedded tokenizer, "
                "fp16/bf16/fp8 scaled, or the official .pth with a tokenizer folder).",
    inputs=(
        Input("text_encoder_name", "COMBO", options=lambda: host.list_models("text_encoders"),
              tooltip="e.g. umt5_xxl_fp8_e4m3fn_scaled.safetensors"),
        Input("tokenizer", "STRING", default="", optional=True,
              tooltip="empty: the tokenizer embedded in the file (or shipped beside it); else the name of a "
                      "folder in models/text_encoders holding spiece.model or tokenizer.json, e.g. google/umt5-xxl"),
        Input("device", "COMBO", default="default", options=("default", "cpu"), optional=True,
              tooltip="cpu keeps the 5.7B encoder off the GPU"),
        Input("dtype", "COMBO", default="auto", options=tuple(DTYPES), optional=True),
    ),
    outputs=(Output("WANCORE_TEXT_ENCODER", "text_encoder"),),
    fn=load_text_encoder,
    validate=validate_text_encoder,
)

NODES = (MODEL_LOADER, VAE_LOADER, TEXT_ENCODER_LOADER)
