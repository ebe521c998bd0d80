"""Generator of the shipped workflows: one description per graph -> the UI file (``workflows/<name>.json``,
loads in the ComfyUI canvas) and the API file (``workflows/api/<name>.json``, POSTed to ``/prompt``).

Both formats (docs/comfyui.md section 8) are derived from the node declarations (``nodes.NODE_SPECS`` for ours,
``core_nodes()`` below for the few ComfyUI core nodes used), so widget order, socket slots and link types can
never drift from the nodes. The committed JSON must equal this script's output (``tests/nodes/
test_workflows.py`` checks it). Regenerate after changing a node's inputs or a workflow here:

    python workflows/build.py          # rewrite the JSON files
    python workflows/build.py --check  # exit 1 if a committed file differs
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS_DIR = ROOT / "workflows"
PACK_MODULE = "custom_nodes_x_wancore_pack"  # the name ComfyUI-like loaders (and tests/nodes) give the pack


def load_pack():
    """Import the pack by path under a path-like module name, as ComfyUI does (no ComfyUI needed)."""
    if PACK_MODULE in sys.modules:
        return sys.modules[PACK_MODULE]
    spec = importlib.util.spec_from_file_location(PACK_MODULE, ROOT / "__init__.py",
                                                  submodule_search_locations=[str(ROOT)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACK_MODULE] = module
    spec.loader.exec_module(module)
    return module


def _declare():
    load_pack()
    return sys.modules[PACK_MODULE + ".nodes.declare"]


# ---------------------------------------------------------------- model files (download hints)

HF_REPACKAGED = "https://huggingface.co/Comfy-Org/Wan_2.1_ComfyUI_repackaged/resolve/main/split_files"
# ComfyUI's repackaged Wan 2.1 files (docs/comfyui.md section 7.8): file name -> models/ sub-folder.
REPACKAGED_FILES = {
    "wan2.1_t2v_1.3B_fp16.safetensors": "diffusion_models",
    "wan2.1_t2v_1.3B_bf16.safetensors": "diffusion_models",
    "wan2.1_t2v_14B_fp8_scaled.safetensors": "diffusion_models",
    "wan2.1_t2v_14B_fp8_e4m3fn.safetensors": "diffusion_models",  # t2v_distill
    "wan_2.1_vae.safetensors": "vae",
    "umt5_xxl_fp8_e4m3fn_scaled.safetensors": "text_encoders",
    "umt5_xxl_fp16.safetensors": "text_encoders",
    # image-to-video (docs/i2v.md section 1)
    "wan2.1_i2v_480p_14B_fp8_e4m3fn.safetensors": "diffusion_models",
    "wan2.1_flf2v_720p_14B_fp8_e4m3fn.safetensors": "diffusion_models",
    "clip_vision_h.safetensors": "clip_vision",
    # Wan 2.2 (docs/wan22.md section 6), from HF_REPACKAGED_22
    "wan2.2_t2v_high_noise_14B_fp8_scaled.safetensors": "diffusion_models",
    "wan2.2_t2v_low_noise_14B_fp8_scaled.safetensors": "diffusion_models",
    "wan2.2_i2v_high_noise_14B_fp8_scaled.safetensors": "diffusion_models",
    "wan2.2_i2v_low_noise_14B_fp8_scaled.safetensors": "diffusion_models",
    "wan2.2_ti2v_5B_fp16.safetensors": "diffusion_models",
    "wan2.2_vae.safetensors": "vae",
    # VACE (docs/vace.md section 3)
    "wan2.1_vace_1.3B_fp16.safetensors": "diffusion_models",
}
HF_REPACKAGED_22 = "https://huggingface.co/Comfy-Org/Wan_2.2_ComfyUI_Repackaged/resolve/main/split_files"
DIT_A14B_HIGH = "wan2.2_t2v_high_noise_14B_fp8_scaled.safetensors"
DIT_A14B_LOW = "wan2.2_t2v_low_noise_14B_fp8_scaled.safetensors"
DIT_I2V_A14B_HIGH = "wan2.2_i2v_high_noise_14B_fp8_scaled.safetensors"
DIT_I2V_A14B_LOW = "wan2.2_i2v_low_noise_14B_fp8_scaled.safetensors"
DIT_TI2V_5B = "wan2.2_ti2v_5B_fp16.safetensors"
VAE_22 = "wan2.2_vae.safetensors"
DIT_1_3B = "wan2.1_t2v_1.3B_fp16.safetensors"
DIT_I2V = "wan2.1_i2v_480p_14B_fp8_e4m3fn.safetensors"
DIT_FLF2V = "wan2.1_flf2v_720p_14B_fp8_e4m3fn.safetensors"
CLIP_VISION = "clip_vision_h.safetensors"
VAE = "wan_2.1_vae.safetensors"
DIT_VACE = "wan2.1_vace_1.3B_fp16.safetensors"
VIDEO_INPUT = "example.mp4"  # the control video in ComfyUI's input folder (LoadVideo)
MASK_INPUT = "mask.png"  # inpaint: LoadImage's MASK is 1 - alpha (transparent = generate)
UMT5 = "umt5_xxl_fp8_e4m3fn_scaled.safetensors"
DEMO = "wancore-demo (built-in)"  # nodes.models.DEMO_NAME: the packaged demo model, listed by every loader
# Which input of which loader names a model file (the UI offers the download hint on these nodes).
MODEL_FILE_INPUTS = {
    "WanCoreModelLoader": "model_name", "WanCoreVAELoader": "vae_name",
    "WanCoreTextEncoderLoader": "text_encoder_name", "VAELoader": "vae_name", "UNETLoader": "unet_name",
    "WanCoreCLIPVisionLoader": "clip_name",
}
LORA = "wan2.1_t2v_1.3B_lora.safetensors"  # native_t2v_fast: stands for the user's LoRA file (models/loras)
# t2v_distill: the 14B DiT and lightx2v's step/CFG-distilled LoRA as Kijai/WanVideo_comfy names it (models/loras)
DIT_14B = "wan2.1_t2v_14B_fp8_e4m3fn.safetensors"
LORA_DISTILL = "Wan21_T2V_14B_lightx2v_cfg_step_distill_lora_rank32.safetensors"
SAMPLERS = ("euler", "euler_ancestral", "heun", "dpmpp_2m", "dpmpp_2m_sde", "uni_pc", "uni_pc_bh2", "lcm")
SCHEDULERS = ("simple", "sgm_uniform", "karras", "exponential", "ddim_uniform", "beta", "normal", "linear_quadratic")


def model_hint(name: str) -> dict[str, str]:
    directory = REPACKAGED_FILES[name]
    base = HF_REPACKAGED_22 if name.startswith("wan2.2_") else HF_REPACKAGED
    return {"name": name, "url": f"{base}/{directory}/{name}?download=true", "directory": directory}


# ---------------------------------------------------------------- ComfyUI core nodes used here

@dataclass(frozen=True)
class CoreNode:
    """The inputs/outputs of a ComfyUI core node as used by our workflows (read from ComfyUI 0.33's
    sources, docs/comfyui.md sections 7.7-7.8). Only inputs the workflows set are listed; other optional ones keep their
    defaults."""

    node_id: str
    display_name: str
    inputs: tuple
    outputs: tuple
    api_extra: tuple[tuple[str, str], ...] = ()  # API-only inputs: (name, widget whose value they repeat)


def core_nodes() -> dict[str, CoreNode]:
    d = _declare()
    Input, Output = d.Input, d.Output
    res = 16384  # nodes.MAX_RESOLUTION
    return {n.node_id: n for n in (
        CoreNode("VAELoader", "Load VAE", (Input("vae_name", "COMBO", options=(VAE,)),), (Output("VAE", "VAE"),)),
        # i2v_wan21 / flf2v_wan21: ComfyUI's image loader (nodes.py LoadImage; the upload button is UI-only)
        CoreNode("LoadImage", "Load Image", (Input("image", "COMBO", options=("example.png", MASK_INPUT)),),
                 (Output("IMAGE", "IMAGE"), Output("MASK", "MASK"))),
        # vace_control / vace_inpaint: ComfyUI's video loader and its frames (comfy_extras/nodes_video.py, 0.3.64)
        CoreNode("LoadVideo", "Load Video", (Input("file", "COMBO", options=(VIDEO_INPUT,)),),
                 (Output("VIDEO", "VIDEO"),)),
        CoreNode("GetVideoComponents", "Get Video Components", (Input("video", "VIDEO"),),
                 (Output("IMAGE", "images"), Output("AUDIO", "audio"), Output("FLOAT", "fps"))),
        # native_vace: ComfyUI's VACE conditioning and reference-frame trim (comfy_extras/nodes_wan.py, 0.3.64)
        CoreNode("WanVaceToVideo", "WanVaceToVideo", (
            Input("positive", "CONDITIONING"),
            Input("negative", "CONDITIONING"),
            Input("vae", "VAE"),
            Input("width", "INT", default=832, min=16, max=res, step=16),
            Input("height", "INT", default=480, min=16, max=res, step=16),
            Input("length", "INT", default=81, min=1, max=res, step=4),
            Input("batch_size", "INT", default=1, min=1, max=4096),
            Input("strength", "FLOAT", default=1.0, min=0.0, max=1000.0, step=0.01),
            Input("control_video", "IMAGE", optional=True),
            Input("control_masks", "MASK", optional=True),
            Input("reference_image", "IMAGE", optional=True),
        ), (Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent"),
            Output("INT", "trim_latent"))),
        CoreNode("TrimVideoLatent", "TrimVideoLatent", (
            Input("samples", "LATENT"),
            Input("trim_amount", "INT", default=0, min=0, max=99999),
        ), (Output("LATENT", "LATENT"),)),
        CoreNode("VAEDecode", "VAE Decode", (Input("samples", "LATENT"), Input("vae", "VAE")),
                 (Output("IMAGE", "IMAGE"),)),
        CoreNode("EmptyHunyuanLatentVideo", "Empty HunyuanVideo 1.0 Latent", (
            Input("width", "INT", default=848, min=16, max=res, step=16),
            Input("height", "INT", default=480, min=16, max=res, step=16),
            Input("length", "INT", default=25, min=1, max=res, step=4),
            Input("batch_size", "INT", default=1, min=1, max=4096),
        ), (Output("LATENT", "LATENT"),)),
        CoreNode("CreateVideo", "Create Video", (
            Input("images", "IMAGE"),
            Input("fps", "FLOAT", default=30.0, min=1.0, max=120.0, step=1.0),
            Input("audio", "AUDIO", optional=True),
        ), (Output("VIDEO", "VIDEO"),)),
        # SaveVideo: 'format' is a dynamic combo whose 'codec' child is sent as "format.codec" by current
        # ComfyUI; older ones take a plain 'codec' combo. The API files carry both (unknown keys are ignored).
        CoreNode("SaveVideo", "Save Video", (
            Input("video", "VIDEO"),
            Input("filename_prefix", "STRING", default="video/ComfyUI"),
            Input("format", "COMBO", default="auto", options=("auto", "mp4", "mkv", "webm")),
            Input("codec", "COMBO", default="auto", options=("auto", "h264", "av1")),
        ), (), api_extra=(("format.codec", "codec"),)),
        # native_t2v_fast: ComfyUI's native Wan model path (nodes.py, comfy_extras/nodes_model_advanced.py)
        CoreNode("UNETLoader", "Load Diffusion Model", (
            Input("unet_name", "COMBO", options=(DIT_1_3B, DIT_VACE)),
            Input("weight_dtype", "COMBO", default="default",
                  options=("default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2")),
        ), (Output("MODEL", "MODEL"),)),
        CoreNode("LoraLoaderModelOnly", "LoraLoaderModelOnly", (
            Input("model", "MODEL"),
            Input("lora_name", "COMBO", options=(LORA,)),
            Input("strength_model", "FLOAT", default=1.0, min=-100.0, max=100.0, step=0.01),
        ), (Output("MODEL", "MODEL"),)),
        CoreNode("ModelSamplingSD3", "ModelSamplingSD3", (
            Input("model", "MODEL"),
            Input("shift", "FLOAT", default=3.0, min=0.0, max=100.0, step=0.01),
        ), (Output("MODEL", "MODEL"),)),
        # native_long_windows: ComfyUI's context windows for Wan (comfy_extras/nodes_context_windows.py, 0.3.64;
        # lengths in real frames, turned into latent frames by the node; a v3 node, same API form)
        CoreNode("WanContextWindowsManual", "WAN Context Windows (Manual)", (
            Input("model", "MODEL"),
            Input("context_length", "INT", default=81, min=1, max=res, step=4),
            Input("context_overlap", "INT", default=30, min=0),
            Input("context_schedule", "COMBO", default="standard_static",
                  options=("standard_static", "standard_uniform", "looped_uniform", "batched")),
            Input("context_stride", "INT", default=1, min=1),
            Input("closed_loop", "BOOLEAN", default=False),
            Input("fuse_method", "COMBO", default="pyramid", options=("pyramid", "relative", "flat", "overlap-linear")),
        ), (Output("MODEL", "MODEL"),)),
        CoreNode("KSampler", "KSampler", (
            Input("model", "MODEL"),
            Input("seed", "INT", default=0, min=0, max=0xffffffffffffffff, control_after_generate=True),
            Input("steps", "INT", default=20, min=1, max=10000),
            Input("cfg", "FLOAT", default=8.0, min=0.0, max=100.0, step=0.1),
            Input("sampler_name", "COMBO", default="euler", options=SAMPLERS),
            Input("scheduler", "COMBO", default="simple", options=SCHEDULERS),
            Input("positive", "CONDITIONING"),
            Input("negative", "CONDITIONING"),
            Input("latent_image", "LATENT"),
            Input("denoise", "FLOAT", default=1.0, min=0.0, max=1.0, step=0.01),
        ), (Output("LATENT", "LATENT"),)),
    )}


VIRTUAL_NODES = ("MarkdownNote",)  # UI-only (not in API files)


# ---------------------------------------------------------------- workflow descriptions

@dataclass
class Node:
    id: int
    type: str
    values: dict[str, Any] = field(default_factory=dict)  # widget values (missing = declared default)
    links: dict[str, tuple[int, int]] = field(default_factory=dict)  # input name -> (source id, output slot)
    title: str | None = None
    color: tuple[str, str] | None = None  # (color, bgcolor)
    control: str = "randomize"  # control_after_generate value for seed widgets (UI only)


@dataclass
class Workflow:
    name: str
    note: str
    nodes: list[Node]


PROMPT = ("A red fox trots through deep fresh snow in a quiet pine forest at golden hour, its breath visible in "
          "the cold air. The camera tracks alongside at low height. Cinematic, natural motion, soft light.")
LONG_PROMPT = ("Aerial drone shot gliding slowly along a winding river through autumn mountains at sunrise; mist "
               "lifts off the water, flocks of birds cross the frame, the light warms from blue to gold. "
               "Smooth continuous camera motion, realistic, highly detailed.")
POSITIVE = ("#232", "#353")
NEGATIVE = ("#322", "#533")

# What web/wancore.js draws under every latent-making node and sampler of these graphs (checked in headless
# Chromium against a real ComfyUI: bench/canvas_check.mjs).
_CANVAS_NOTE = ("The grey lines under the latent and sampler nodes are WanCore's live cost estimate (latent shape "
                "and tokens, attention per step, DiT weights + activations, peak memory and FLOPs for the steps; "
                "a Wan 2.2 A14B pair: one expert); green lines add a connected cache's expected DiT evaluations "
                "and how context windows split the video, with each window's tokens and peak memory; a red line "
                "flags a frame count that is not 4n+1 or a size the model cannot take (multiples of 16; 32 for "
                "Wan 2.2 TI2V-5B).\n")

_FILES_NOTE = """
**Model files** (ComfyUI's repackaged Wan 2.1 files; the loaders offer the download):

```
ComfyUI/models/
├── diffusion_models/wan2.1_t2v_1.3B_fp16.safetensors
├── text_encoders/umt5_xxl_fp8_e4m3fn_scaled.safetensors
└── vae/wan_2.1_vae.safetensors
```
Source: huggingface.co/Comfy-Org/Wan_2.1_ComfyUI_repackaged (split_files/...).
""" + _CANVAS_NOTE


def _loaders(model_values: dict | None = None) -> list[Node]:
    return [
        Node(1, "WanCoreModelLoader", {"model_name": DIT_1_3B, **(model_values or {})}),
        Node(2, "WanCoreTextEncoderLoader", {"text_encoder_name": UMT5}),
        Node(3, "WanCoreVAELoader", {"vae_name": VAE}),
    ]


def _encode(prompt: str) -> Node:
    return Node(4, "WanCoreTextEncode", {"positive": prompt}, {"text_encoder": (2, 0)}, color=POSITIVE)


def _sampler(values: dict | None = None, latent: int = 5) -> Node:
    return Node(6, "WanCoreSampler",
                {"seed": 42, "steps": 30, "guidance": 6.0, "shift": 8.0, "solver": "unipc",
                 "schedule": "official", "denoise": 1.0, **(values or {})},
                {"model": (1, 0), "embeds": (4, 0), "latent": (latent, 0)})


def _output(image_source: int, prefix: str) -> list[Node]:
    return [
        Node(8, "CreateVideo", {"fps": 16.0}, {"images": (image_source, 0)}),
        Node(9, "SaveVideo", {"filename_prefix": prefix, "format": "auto", "codec": "auto"}, {"video": (8, 0)}),
    ]


def workflows() -> list[Workflow]:
    basic = Workflow("t2v_basic", "## WanCore: text to video (Wan 2.1 1.3B)\n"
                     "832x480, 81 frames (5 s at 16 fps), UniPC, 30 steps, guidance 6, shift 8 (the usual 1.3B "
                     "setting; Wan's official default is 5).\n" + _FILES_NOTE, [
        *_loaders(),
        _encode(PROMPT),
        Node(5, "WanCoreEmptyLatent", {"width": 832, "height": 480, "frames": 81, "batch_size": 1}),
        _sampler(),
        Node(7, "WanCoreDecode", {"tiling": "auto"}, {"vae": (3, 0), "samples": (6, 0)}),
        *_output(7, "video/WanCore_t2v"),
    ])
    long_tiled = Workflow("t2v_long_tiled", "## WanCore: long video, tiled decode\n"
                          "161 frames (10 s at 16 fps) at 832x480. The DiT sees 63,960 tokens (about twice the "
                          "81-frame cost per step and four times the attention); the VAE decodes one latent "
                          "frame at a time with spatial tiles, so decode memory stays flat in length and "
                          "resolution.\n" + _FILES_NOTE, [
        *_loaders(),
        _encode(LONG_PROMPT),
        Node(5, "WanCoreEmptyLatent", {"width": 832, "height": 480, "frames": 161, "batch_size": 1}),
        _sampler(),
        Node(7, "WanCoreDecode", {"tiling": "on", "tile_size": 256, "overlap": 64},
             {"vae": (3, 0), "samples": (6, 0)}),
        *_output(7, "video/WanCore_long"),
    ])
    native = Workflow("t2v_native_mix", "## WanCore with ComfyUI's native nodes\n"
                      "ComfyUI's native *EmptyHunyuanLatentVideo* makes the latent, the WanCore sampler "
                      "samples it, and ComfyUI's native *Load VAE* + *VAE Decode* decode the result: WanCore "
                      "LATENTs are raw Wan VAE latents, exactly what the native nodes use.\n" + _FILES_NOTE, [
        Node(1, "WanCoreModelLoader", {"model_name": DIT_1_3B}),
        Node(2, "WanCoreTextEncoderLoader", {"text_encoder_name": UMT5}),
        Node(3, "VAELoader", {"vae_name": VAE}),
        _encode(PROMPT),
        Node(5, "EmptyHunyuanLatentVideo", {"width": 832, "height": 480, "length": 81, "batch_size": 1}),
        _sampler(),
        Node(7, "VAEDecode", {}, {"samples": (6, 0), "vae": (3, 0)}),
        *_output(7, "video/WanCore_native"),
    ])
    return [basic, long_tiled, native, distill_workflow(), multi_gpu_workflow(),
            fast_workflow(), cached_workflow(), demo_workflow(), long_windows_workflow(), extend_workflow(),
            native_fast_workflow(), native_long_windows_workflow(), native_multi_gpu_workflow(),
            *image_workflows(), *wan22_workflows(), *vace_workflows(), native_vace_workflow()]


_VACE_FILES_NOTE = """
**Model files** (ComfyUI's repackaged Wan 2.1 files; the loaders offer the download):

```
ComfyUI/models/
├── diffusion_models/wan2.1_vace_1.3B_fp16.safetensors
├── text_encoders/umt5_xxl_fp8_e4m3fn_scaled.safetensors
└── vae/wan_2.1_vae.safetensors
```
Source: huggingface.co/Comfy-Org/Wan_2.1_ComfyUI_repackaged (split_files/...). Put the inputs in ComfyUI's input
folder or upload them in the Load nodes. Official VACE settings (Wan2.1 generate.py): 50 UniPC steps, guidance 5,
shift 16, strength 1. See docs/vace.md.
"""


def _vace_nodes(vace_links: dict, prefix: str, extra: list[Node], values: dict | None = None) -> list[Node]:
    """Loaders, prompt, WanCore VACE (node 5), the sampler on its embeds and latent, decode, output."""
    sampler = _sampler({"steps": 50, "guidance": 5.0, "shift": 16.0})
    sampler.links.update({"embeds": (vace_links.pop("sampler_embeds", (5, 0))), "latent": (5, 1)})
    return [
        *_loaders({"model_name": DIT_VACE}),
        _encode(PROMPT),
        Node(5, "WanCoreVace", {"width": 832, "height": 480, "length": 81, "batch_size": 1, "strength": 1.0,
                                **(values or {})}, {"embeds": (4, 0), "vae": (3, 0), **vace_links}),
        sampler,
        Node(7, "WanCoreDecode", {"tiling": "auto"}, {"vae": (3, 0), "samples": (6, 0)}),
        *_output(7, prefix),
        *extra,
    ]


def vace_workflows() -> list[Workflow]:
    """Wan 2.1 VACE 1.3B through WanCore VACE -> WanCore Sampler (docs/vace.md section 3): reference to video, a
    control video with a reference of its own strength (two chained VACE nodes), inpainting with a mask."""
    video = [Node(10, "LoadVideo", {"file": VIDEO_INPUT}, title="Control video"),
             Node(11, "GetVideoComponents", {}, {"video": (10, 0)})]
    reference = _vace_nodes({"reference_image": (10, 0)}, "video/WanCore_vace_reference",
                            [Node(10, "LoadImage", {"image": "example.png"}, title="Reference image")])
    control = _vace_nodes({"control_video": (11, 0), "sampler_embeds": (13, 0)}, "video/WanCore_vace_control", [
        *video, Node(12, "LoadImage", {"image": "example.png"}, title="Reference image"),
        Node(13, "WanCoreVace", {"width": 832, "height": 480, "length": 81, "batch_size": 1, "strength": 1.0},
             {"embeds": (5, 0), "vae": (3, 0), "reference_image": (12, 0)}, title="WanCore VACE (reference)")])
    for n in control:
        if n.type == "WanCoreSampler":
            n.links["latent"] = (13, 1)
    inpaint = _vace_nodes({"control_video": (11, 0), "control_masks": (12, 1)}, "video/WanCore_vace_inpaint",
                          [*video, Node(12, "LoadImage", {"image": MASK_INPUT}, title="Mask (transparent = redraw)")])
    return [
        Workflow("vace_reference", "## WanCore: reference to video (Wan 2.1 VACE 1.3B)\n"
                 "The reference image (a subject or an object; each image of a batch is one reference) is placed "
                 "in front of the video as one latent frame; the model shows it in the video the prompt "
                 "describes. The sampler drops the reference frame before decoding.\n" + _VACE_FILES_NOTE,
                 reference),
        Workflow("vace_control", "## WanCore: control video + reference (Wan 2.1 VACE 1.3B)\n"
                 "The control video (depth, pose, edges, grey-scale or scribbles: any frames to follow) goes to "
                 "the first WanCore VACE node, the reference image to a second one chained after it: each has its "
                 "own strength and their effects add. The control video is fitted to 832x480, 81 frames (centre "
                 "crop, bilinear, cut or padded) and the node says so.\n" + _VACE_FILES_NOTE, control),
        Workflow("vace_inpaint", "## WanCore: video inpainting (Wan 2.1 VACE 1.3B)\n"
                 "The mask image's transparent area (MASK = 1) is redrawn in every frame of the video, the rest is "
                 "kept (a one-frame mask applies to every frame; a mask video works too). Outpainting: a video "
                 "padded with a border and a mask of 1 there.\n" + _VACE_FILES_NOTE, inpaint),
    ]


def native_vace_workflow() -> Workflow:
    """ComfyUI's native VACE graph (WanVaceToVideo, KSampler, TrimVideoLatent) with WanCore's native patches."""
    return Workflow("native_vace", "## WanCore patches on ComfyUI's native VACE model\n"
                    "ComfyUI's *Load Diffusion Model* loads Wan 2.1 VACE 1.3B, *WanVaceToVideo* encodes the "
                    "reference image, *KSampler* samples and *TrimVideoLatent* drops the reference frame. "
                    "*TrimVideoLatent*'s amount is the number of reference images (WanVaceToVideo's trim_latent "
                    "output). **WanCore Native Attention** and **WanCore Native Cache** patch the native model "
                    "(its 30 main blocks; the VACE blocks run after the main block they feed). Official VACE settings: "
                    "shift 16, cfg 5, 50 steps. "
                    "See docs/vace.md.\n" + _VACE_FILES_NOTE, [
        Node(1, "UNETLoader", {"unet_name": DIT_VACE, "weight_dtype": "default"}),
        Node(2, "WanCoreTextEncoderLoader", {"text_encoder_name": UMT5}),
        Node(3, "VAELoader", {"vae_name": VAE}),
        _encode(PROMPT),
        Node(5, "WanVaceToVideo", {"width": 832, "height": 480, "length": 81, "batch_size": 1, "strength": 1.0},
             {"positive": (14, 0), "negative": (14, 1), "vae": (3, 0), "reference_image": (10, 0)}),
        Node(6, "KSampler", {"seed": 42, "steps": 50, "cfg": 5.0, "sampler_name": "uni_pc", "scheduler": "simple",
                             "denoise": 1.0},
             {"model": (13, 0), "positive": (5, 0), "negative": (5, 1), "latent_image": (5, 2)}),
        Node(7, "VAEDecode", {}, {"samples": (15, 0), "vae": (3, 0)}),
        *_output(7, "video/WanCore_native_vace"),
        Node(10, "LoadImage", {"image": "example.png"}, title="Reference image"),
        Node(11, "WanCoreNativeAttention", {"backend": "auto", "skiparse": "none", "k": 4}, {"model": (1, 0)}),
        Node(12, "WanCoreNativeCache", {"method": "easycache"}, {"model": (11, 0)}),
        Node(13, "ModelSamplingSD3", {"shift": 16.0}, {"model": (12, 0)}),
        Node(14, "WanCoreEmbedsToConditioning", {"text_len": 512}, {"embeds": (4, 0)}),
        # WanVaceToVideo's trim_latent: 1 reference image = 1 latent frame (a widget here; link it if you like)
        Node(15, "TrimVideoLatent", {"trim_amount": 1}, {"samples": (6, 0)}, title="TrimVideoLatent (1 reference)"),
    ])


_I2V_FILES_NOTE = """
**Model files** (ComfyUI's repackaged Wan 2.1 files; the loaders offer the download):

```
ComfyUI/models/
├── diffusion_models/{dit}
├── clip_vision/clip_vision_h.safetensors
├── text_encoders/umt5_xxl_fp8_e4m3fn_scaled.safetensors
└── vae/wan_2.1_vae.safetensors
```
Source: huggingface.co/Comfy-Org/Wan_2.1_ComfyUI_repackaged (split_files/...). Put the image(s) in ComfyUI's input
folder or upload them in the Load Image node(s); see docs/i2v.md.
""" + _CANVAS_NOTE


def image_workflows() -> list[Workflow]:
    """Wan 2.1 image-to-video (I2V-14B 480P) and first-last-frame (FLF2V-14B 720P), docs/i2v.md sections 5 and 7:
    Load Image -> WanCore Image to Video (VAE, CLIP vision) -> WanCore Sampler (image_cond + latent)."""
    out = []
    for name, dit, size, shift, steps, prefix, title, about in (
            ("i2v_wan21", DIT_I2V, (832, 480), 3.0, 40, "video/WanCore_i2v", "image to video (Wan 2.1 I2V-14B)",
             "The start image is resized to 832x480 (no crop: pick the size with the image's aspect ratio, "
             "480x832 for portrait). Official settings: 40 UniPC steps, guidance 5, shift 3 at 480P."),
            ("flf2v_wan21", DIT_FLF2V, (1280, 720), 16.0, 50, "video/WanCore_flf2v",
             "first and last frame to video (Wan 2.1 FLF2V-14B)",
             "The video goes from the start image to the end image, both resized to 1280x720. Official "
             "settings: 50 UniPC steps, guidance 5, shift 16.")):
        (w, h) = size
        i2v_links = {"vae": (3, 0), "start_image": (10, 0), "clip_vision": (11, 0)}
        sampler = _sampler({"steps": steps, "guidance": 5.0, "shift": shift})
        sampler.links.update({"latent": (5, 1), "image_cond": (5, 0)})
        nodes = [
            *_loaders({"model_name": dit}),
            _encode(PROMPT),
            Node(5, "WanCoreImageToVideo", {"width": w, "height": h, "frames": 81, "batch_size": 1}, i2v_links),
            sampler,
            Node(7, "WanCoreDecode", {"tiling": "auto"}, {"vae": (3, 0), "samples": (6, 0)}),
            *_output(7, prefix),
            Node(10, "LoadImage", {"image": "example.png"}, title="Start image"),
            Node(11, "WanCoreCLIPVisionLoader", {"clip_name": CLIP_VISION}),
        ]
        if name == "flf2v_wan21":
            nodes.append(Node(12, "LoadImage", {"image": "example.png"}, title="End image"))
            i2v_links["end_image"] = (12, 0)
        out.append(Workflow(name, f"## WanCore: {title}\n{about}\n" + _I2V_FILES_NOTE.format(dit=dit), nodes))
    return out


_WAN22_FILES_NOTE = """
**Model files** (ComfyUI's repackaged Wan 2.2 files; the loaders offer the download):

```
ComfyUI/models/
{files}├── text_encoders/umt5_xxl_fp8_e4m3fn_scaled.safetensors
└── vae/{vae}
```
Source: huggingface.co/Comfy-Org/Wan_2.2_ComfyUI_Repackaged (split_files/...); the text encoder is Wan 2.1's.
See docs/wan22.md.
""" + _CANVAS_NOTE


def wan22_workflows() -> list[Workflow]:
    """Wan 2.2 (docs/wan22.md section 6): the A14B experts through WanCoreMoE, and TI2V-5B image-to-video."""
    a14b = Workflow("t2v_wan22_a14b", "## WanCore: text to video (Wan 2.2 T2V-A14B, two experts)\n"
                    "The high-noise expert runs the steps with timestep >= 875, the low-noise expert the rest "
                    "(**WanCore Wan 2.2 MoE**), each with its own guidance (4.0 / 3.0; the sampler's guidance is "
                    "not used). Official settings: 1280x720, 81 frames at 16 fps, 40 UniPC steps, shift 12. Both "
                    "experts are 14B models: fp8 files keep each at about 14 GB.\n"
                    + _WAN22_FILES_NOTE.format(files=f"├── diffusion_models/{DIT_A14B_HIGH}\n"
                                                     f"├── diffusion_models/{DIT_A14B_LOW}\n", vae=VAE), [
        Node(1, "WanCoreModelLoader", {"model_name": DIT_A14B_HIGH}, title="High-noise expert"),
        Node(2, "WanCoreTextEncoderLoader", {"text_encoder_name": UMT5}),
        Node(3, "WanCoreVAELoader", {"vae_name": VAE}),
        _encode(PROMPT),
        Node(5, "WanCoreEmptyLatent", {"width": 1280, "height": 720, "frames": 81, "batch_size": 1}),
        Node(6, "WanCoreSampler", {"seed": 42, "steps": 40, "guidance": 4.0, "shift": 12.0, "solver": "unipc",
                                   "schedule": "official", "denoise": 1.0},
             {"model": (11, 0), "embeds": (4, 0), "latent": (5, 0)}),
        Node(7, "WanCoreDecode", {"tiling": "auto"}, {"vae": (3, 0), "samples": (6, 0)}),
        *_output(7, "video/WanCore_wan22_a14b"),
        Node(10, "WanCoreModelLoader", {"model_name": DIT_A14B_LOW}, title="Low-noise expert"),
        Node(11, "WanCoreMoE", {"boundary": 0.875, "guidance_high": 4.0, "guidance_low": 3.0},
             {"high_noise_model": (1, 0), "low_noise_model": (10, 0)}),
    ])
    ti2v = Workflow("ti2v_wan22_5b", "## WanCore: image to video (Wan 2.2 TI2V-5B)\n"
                    "The start image, resized to 1280x704 (no crop), becomes the first latent frame and stays "
                    "fixed (**WanCore Image to Video Latent (Wan 2.2 TI2V-5B)**); for text to video use **WanCore "
                    "Empty Video Latent (Wan 2.2 TI2V-5B)** instead. Official settings: 121 frames at 24 fps, "
                    "50 UniPC steps, guidance 5, shift 5; sizes are multiples of 32 (the Wan 2.2 VAE compresses "
                    "16x16).\n" + _WAN22_FILES_NOTE.format(files=f"├── diffusion_models/{DIT_TI2V_5B}\n", vae=VAE_22),
                    [
        Node(1, "WanCoreModelLoader", {"model_name": DIT_TI2V_5B}),
        Node(2, "WanCoreTextEncoderLoader", {"text_encoder_name": UMT5}),
        Node(3, "WanCoreVAELoader", {"vae_name": VAE_22}),
        _encode(PROMPT),
        Node(5, "WanCoreImageToVideoLatent22", {"width": 1280, "height": 704, "frames": 121, "batch_size": 1},
             {"vae": (3, 0), "start_image": (10, 0)}),
        _sampler({"steps": 50, "guidance": 5.0, "shift": 5.0}),
        Node(7, "WanCoreDecode", {"tiling": "auto"}, {"vae": (3, 0), "samples": (6, 0)}),
        Node(8, "CreateVideo", {"fps": 24.0}, {"images": (7, 0)}),
        Node(9, "SaveVideo", {"filename_prefix": "video/WanCore_ti2v_5b", "format": "auto", "codec": "auto"},
             {"video": (8, 0)}),
        Node(10, "LoadImage", {"image": "example.png"}, title="Start image"),
    ])
    return [a14b, i2v_a14b_workflow(), ti2v]


def i2v_a14b_workflow() -> Workflow:
    """Wan 2.2 I2V-A14B: two 36-channel experts without CLIP through WanCoreMoE, WanCoreImageToVideo without a CLIP
    vision input; official settings from Wan2.2 wan/configs/wan_i2v_A14B.py lines 34-37 (shift 5.0, 40 steps,
    boundary 0.900, guidance 3.5 / 3.5)."""
    sampler = _sampler({"steps": 40, "guidance": 3.5, "shift": 5.0})
    sampler.links.update({"model": (11, 0), "latent": (5, 1), "image_cond": (5, 0)})
    return Workflow("i2v_wan22_a14b", "## WanCore: image to video (Wan 2.2 I2V-A14B, two experts)\n"
                    "The start image is resized to 1280x720 (no crop) and VAE-encoded as the conditioning of both "
                    "experts; Wan 2.2 I2V needs no CLIP vision. The high-noise expert runs the steps with timestep "
                    ">= 900, the low-noise expert the rest (**WanCore Wan 2.2 MoE**), guidance 3.5 / 3.5 (the "
                    "sampler's guidance is not used). Official settings: 81 frames at 16 fps, 40 UniPC steps, "
                    "shift 5.\n" + _WAN22_FILES_NOTE.format(files=f"├── diffusion_models/{DIT_I2V_A14B_HIGH}\n"
                                                                  f"├── diffusion_models/{DIT_I2V_A14B_LOW}\n",
                                                            vae=VAE), [
        Node(1, "WanCoreModelLoader", {"model_name": DIT_I2V_A14B_HIGH}, title="High-noise expert"),
        Node(2, "WanCoreTextEncoderLoader", {"text_encoder_name": UMT5}),
        Node(3, "WanCoreVAELoader", {"vae_name": VAE}),
        _encode(PROMPT),
        Node(5, "WanCoreImageToVideo", {"width": 1280, "height": 720, "frames": 81, "batch_size": 1},
             {"vae": (3, 0), "start_image": (10, 0)}),
        sampler,
        Node(7, "WanCoreDecode", {"tiling": "auto"}, {"vae": (3, 0), "samples": (6, 0)}),
        *_output(7, "video/WanCore_wan22_i2v_a14b"),
        Node(10, "LoadImage", {"image": "example.png"}, title="Start image"),
        Node(11, "WanCoreMoE", {"boundary": 0.9, "guidance_high": 3.5, "guidance_low": 3.5},
             {"high_noise_model": (1, 0), "low_noise_model": (12, 0)}),
        Node(12, "WanCoreModelLoader", {"model_name": DIT_I2V_A14B_LOW}, title="Low-noise expert"),
    ])


def _native_head(length: int, model: int, prefix: str) -> list[Node]:
    """The part every native graph shares: UNETLoader, WanCore's text encoder and VAE, the prompt, the empty latent
    (``length`` frames), KSampler on the MODEL of node ``model`` and node 14's conditioning, decode and output."""
    return [
        Node(1, "UNETLoader", {"unet_name": DIT_1_3B, "weight_dtype": "default"}),
        Node(2, "WanCoreTextEncoderLoader", {"text_encoder_name": UMT5}),
        Node(3, "WanCoreVAELoader", {"vae_name": VAE}),
        _encode(PROMPT),
        Node(5, "EmptyHunyuanLatentVideo", {"width": 832, "height": 480, "length": length, "batch_size": 1}),
        Node(6, "KSampler", {"seed": 42, "steps": 30, "cfg": 6.0, "sampler_name": "uni_pc", "scheduler": "simple",
                             "denoise": 1.0},
             {"model": (model, 0), "positive": (14, 0), "negative": (14, 1), "latent_image": (5, 0)}),
        Node(7, "WanCoreDecode", {"tiling": "auto"}, {"vae": (3, 0), "samples": (6, 0)}),
        *_output(7, prefix),
    ]


def native_fast_workflow() -> Workflow:
    """ComfyUI's native Wan graph (UNETLoader, LoRA, ModelSamplingSD3, KSampler) with WanCore's patch nodes
    (docs/native_patches.md) and WanCore's text encoder and VAE decode."""
    return Workflow("native_t2v_fast", "## WanCore speed-ups on ComfyUI's native Wan model\n"
                    "ComfyUI's *Load Diffusion Model* and *LoraLoaderModelOnly* (pick your LoRA; strength 0 or "
                    "bypass it if you have none), then **WanCore Native Attention** (SageAttention-style 8-bit "
                    "attention + skiparse osp13) and **WanCore Native Cache** (EasyCache): both return a patched "
                    "copy of the MODEL, so they chain with other packs' patches. *ModelSamplingSD3* (shift 8) and "
                    "the native *KSampler* (UniPC, 30 steps, cfg 6) sample; **WanCore Embeds to Conditioning** "
                    "feeds it WanCore's umT5 embeddings. Skiparse and the cache approximate the dense model; the "
                    "cache node reports the DiT evaluations it skipped when sampling ends. See "
                    "docs/native_patches.md.\n" + _FILES_NOTE, [
        *_native_head(81, 13, "video/WanCore_native_fast"),
        Node(10, "LoraLoaderModelOnly", {"lora_name": LORA, "strength_model": 1.0}, {"model": (1, 0)}),
        Node(11, "WanCoreNativeAttention", {"backend": "auto", "skiparse": "osp13", "k": 4}, {"model": (10, 0)}),
        Node(12, "WanCoreNativeCache", {"method": "easycache"}, {"model": (11, 0)}),
        Node(13, "ModelSamplingSD3", {"shift": 8.0}, {"model": (12, 0)}),
        Node(14, "WanCoreEmbedsToConditioning", {"text_len": 512}, {"embeds": (4, 0)}),
    ])


def native_long_windows_workflow() -> Workflow:
    """ComfyUI's native Wan graph with ComfyUI's own context windows (WanContextWindowsManual) and WanCore's three
    native patches (attention, a cache that keeps one state per window, RIFLEx); docs/native_patches.md."""
    return Workflow("native_long_windows", "## WanCore patches on ComfyUI's native Wan model, in context windows\n"
                    "A 161-frame video from Wan 2.1 (trained on 81 frames) on ComfyUI's native graph: ComfyUI's "
                    "*WAN Context Windows (Manual)* makes *KSampler* denoise it as overlapping 81-frame windows "
                    "(overlap 30 real frames, *standard_static*, *pyramid*; lengths in real frames, as the node "
                    "takes them). **WanCore Native Attention** (8-bit attention + skiparse osp13) works on each "
                    "window's token grid; **WanCore Native Cache** (EasyCache) keeps one cache state per window and "
                    "reports the windows it ran; **WanCore Native RIFLEx** (k 0 = auto) lowers the temporal RoPE "
                    "frequency only where a window is longer than the 81 training frames (raise *context_length* "
                    "past 81 to use it). All three return patched copies of the MODEL. See "
                    "docs/native_patches.md.\n" + _FILES_NOTE, [
        *_native_head(161, 15, "video/WanCore_native_long_windows"),
        Node(10, "WanCoreNativeAttention", {"backend": "sage", "skiparse": "osp13", "k": 4}, {"model": (1, 0)}),
        Node(11, "WanCoreNativeCache", {"method": "easycache"}, {"model": (10, 0)}),
        Node(12, "WanCoreNativeRIFLEx", {"k": 0}, {"model": (11, 0)}),
        Node(13, "ModelSamplingSD3", {"shift": 8.0}, {"model": (12, 0)}),
        Node(14, "WanCoreEmbedsToConditioning", {"text_len": 512}, {"embeds": (4, 0)}),
        Node(15, "WanContextWindowsManual", {"context_length": 81, "context_overlap": 30,
                                             "context_schedule": "standard_static", "context_stride": 1,
                                             "closed_loop": False, "fuse_method": "pyramid"}, {"model": (13, 0)}),
    ])


def native_multi_gpu_workflow() -> Workflow:
    """ComfyUI's native Wan graph (UNETLoader, LoRA, WanCore's native patches, KSampler) on two GPUs through
    WanCore Native Context Parallel (docs/parallel.md section 12)."""
    return Workflow("native_t2v_multi_gpu", "## ComfyUI's native Wan graph on two GPUs\n"
                    "ComfyUI's *Load Diffusion Model* and *LoraLoaderModelOnly* (pick your LoRA; strength 0 or "
                    "bypass it if you have none), **WanCore Native Attention** and **WanCore Native Cache** "
                    "(EasyCache), *ModelSamplingSD3*, then **WanCore Native Context Parallel**: the video's tokens "
                    "are split over 2 GPUs (Ulysses 2), same video as on one GPU. A worker process on the second "
                    "GPU builds ComfyUI's own Wan model and gets the patched weights (LoRA applied) once; a changed "
                    "LoRA strength re-sends only the weights that LoRA patches. Ulysses must divide the heads (12 "
                    "for 1.3B, 40 for 14B); *ring* covers the rest; *cfg_parallel* puts cond and uncond on "
                    "different GPUs. See docs/parallel.md section 12.\n" + _FILES_NOTE, [
        *_native_head(81, 15, "video/WanCore_native_multi_gpu"),
        Node(10, "LoraLoaderModelOnly", {"lora_name": LORA, "strength_model": 1.0}, {"model": (1, 0)}),
        Node(11, "WanCoreNativeAttention", {"backend": "auto", "skiparse": "none", "k": 4}, {"model": (10, 0)}),
        Node(12, "WanCoreNativeCache", {"method": "easycache"}, {"model": (11, 0)}),
        Node(13, "ModelSamplingSD3", {"shift": 8.0}, {"model": (12, 0)}),
        Node(14, "WanCoreEmbedsToConditioning", {"text_len": 512}, {"embeds": (4, 0)}),
        Node(15, "WanCoreNativeContextParallel", {"devices": 2, "ulysses": 2, "ring": 1, "cfg_parallel": False},
             {"model": (13, 0)}),
    ])


def _demo_start(prompt: str, frames: int) -> list[Node]:
    """The built-in demo model's loaders, the prompt and the empty 64x64 latent (nodes 1-5)."""
    return [
        Node(1, "WanCoreModelLoader", {"model_name": DEMO}),
        Node(2, "WanCoreTextEncoderLoader", {"text_encoder_name": DEMO}),
        Node(3, "WanCoreVAELoader", {"vae_name": DEMO}),
        Node(4, "WanCoreTextEncode", {"positive": prompt, "negative": ""}, {"text_encoder": (2, 0)}, color=POSITIVE),
        Node(5, "WanCoreEmptyLatent", {"width": 64, "height": 64, "frames": frames, "batch_size": 1}),
    ]


def demo_workflow() -> Workflow:
    """The built-in demo model with its own settings: runs on a CPU in about a minute, nothing to download."""
    return Workflow("t2v_demo", "## WanCore: try it without downloading anything\n"
                    "The built-in demo model (*wancore-demo (built-in)* in each loader: a small Wan 2.1 DiT, VAE "
                    "and umT5 trained on coloured circles and squares moving left, right, up or down) at its own "
                    "settings: 64x64, 17 frames, 20 UniPC steps, guidance 6, shift 3, 8 fps. It runs on a CPU in "
                    "well under two minutes. Prompts it knows: \"a <red|green|blue|yellow> <circle|square> moving "
                    "<left|right|up|down>\", optionally \"and\" a second object; see docs/demo_model.md.\n", [
        *_demo_start("a blue square moving right", 17),
        _sampler({"seed": 1, "steps": 20, "guidance": 6.0, "shift": 3.0}),
        Node(7, "WanCoreDecode", {"tiling": "off"}, {"vae": (3, 0), "samples": (6, 0)}),
        Node(8, "CreateVideo", {"fps": 8.0}, {"images": (7, 0)}),
        Node(9, "SaveVideo", {"filename_prefix": "video/WanCore_demo", "format": "auto", "codec": "auto"},
             {"video": (8, 0)}),
    ])


def long_windows_workflow() -> Workflow:
    """t2v_demo at 4x the demo model's training length, sampled as context windows of that length
    (WanCoreContextWindows on the sampler's optional context input; docs/long_video.md)."""
    sampler = _sampler({"seed": 1, "steps": 20, "guidance": 6.0, "shift": 3.0})
    sampler.links["context"] = (10, 0)
    return Workflow("t2v_long_windows", "## WanCore: a long video in context windows\n"
                    "The built-in demo model (trained on 17 frames) asked for 65 frames: **WanCore Context "
                    "Windows** on the sampler denoises the video as overlapping 17-frame windows (overlap 8 real "
                    "frames = 2 latent frames, schedule *static*, fuse *pyramid*), each run by the model on its "
                    "own at every step and blended back, so every stretch is sampled at the length the model "
                    "knows. Latent frame 0 (one image frame) heads every window (*anchor_first_frame*). Lengths "
                    "are real frames as on ComfyUI's WanContextWindowsManual; for Wan 2.1 / 2.2 use 81-frame "
                    "windows. A connected cache keeps one state per window; the sampler shows the windows it ran. "
                    "Runs on a CPU in a few minutes, nothing to download; see docs/long_video.md.\n", [
        *_demo_start("a blue square moving right", 65),
        sampler,
        Node(7, "WanCoreDecode", {"tiling": "off"}, {"vae": (3, 0), "samples": (6, 0)}),
        Node(8, "CreateVideo", {"fps": 8.0}, {"images": (7, 0)}),
        Node(9, "SaveVideo", {"filename_prefix": "video/WanCore_long_windows", "format": "auto", "codec": "auto"},
             {"video": (8, 0)}),
        Node(10, "WanCoreContextWindows", {"context_frames": 17, "context_overlap": 8, "context_schedule": "static",
                                           "context_stride": 1, "fuse_method": "pyramid", "freenoise": False,
                                           "anchor_first_frame": True}),
    ])


def extend_workflow() -> Workflow:
    """The demo model's clip continued by a second clip from its last frames (WanCore Extend Video -> sampler ->
    decode -> Join Frames; docs/long_video.md section 3)."""
    second = _sampler({"seed": 2, "steps": 20, "guidance": 6.0, "shift": 3.0, "riflex": "off"}, latent=10)
    second.id, second.links = 11, {**second.links, "latent": (10, 1), "extend": (10, 0)}
    return Workflow("extend_video", "## WanCore: continue a clip (clip extension)\n"
                    "The built-in demo model draws a 17-frame clip; **WanCore Extend Video** takes its decoded "
                    "frames and prepares a second 17-frame clip that starts from the last 5 (*overlap*), the "
                    "second **WanCore Sampler** draws it (the demo is text-to-video: the overlap's latents are "
                    "held clean at timestep 0), and **WanCore Join Frames** puts its new frames after the first "
                    "clip's, colour-matched to the overlap: 29 frames. Feed the joined frames to another Extend "
                    "Video to go on, or connect a clip's LATENT instead of its frames to continue in latent space "
                    "(**WanCore Join Latents**, one decode, no VAE round trip). Runs on a CPU in a few minutes; "
                    "see docs/long_video.md.\n", [
        *_demo_start("a yellow circle moving down", 17),
        _sampler({"seed": 1, "steps": 20, "guidance": 6.0, "shift": 3.0, "riflex": "off"}),
        Node(7, "WanCoreDecode", {"tiling": "off"}, {"vae": (3, 0), "samples": (6, 0)}),
        Node(10, "WanCoreExtendVideo", {"frames": 17, "overlap": 5, "conditioning": "auto",
                                        "color_match": "mean-std"},
             {"model": (1, 0), "vae": (3, 0), "images": (7, 0)}),
        second,
        Node(12, "WanCoreDecode", {"tiling": "off"}, {"vae": (3, 0), "samples": (11, 0)}),
        Node(13, "WanCoreJoinFrames", {}, {"extension": (10, 0), "images": (12, 0)}),
        Node(8, "CreateVideo", {"fps": 8.0}, {"images": (13, 0)}),
        Node(9, "SaveVideo", {"filename_prefix": "video/WanCore_extend", "format": "auto", "codec": "auto"},
             {"video": (8, 0)}),
    ])


def distill_workflow() -> Workflow:
    """14B + lightx2v's step/CFG-distilled LoRA (WanCoreLoRA), 4 steps at guidance 1 on the distilled schedule."""
    sampler = _sampler({"steps": 4, "guidance": 1.0, "shift": 5.0, "solver": "euler", "schedule": "lightx2v_distill"})
    sampler.links.update({"model": (10, 0), "embeds": (11, 0)})
    return Workflow("t2v_distill", "## WanCore: 4-step text to video with a distilled LoRA\n"
                    "The 14B DiT with lightx2v's step- and CFG-distilled LoRA (**WanCore LoRA**, strength 1, merged "
                    "into the fp8 weights): 4 Euler steps at guidance 1 on the schedule the LoRA was trained for "
                    "(*lightx2v_distill*: timesteps 1000, 750, 500, 250 before shift 5), about 10x fewer DiT "
                    "evaluations than 30 steps with CFG. Put the LoRA (Kijai/WanVideo_comfy: "
                    f"{LORA_DISTILL}) in models/loras; chain more WanCore LoRA nodes for style LoRAs. Changing a "
                    "strength does not reload the model. At guidance 1 the negative prompt acts through **WanCore "
                    "NAG** (normalized attention guidance, scale 11; 1 = off). See docs/lora.md.\n" + _FILES_NOTE, [
        *_loaders({"model_name": DIT_14B}),
        _encode(PROMPT),
        Node(5, "WanCoreEmptyLatent", {"width": 832, "height": 480, "frames": 81, "batch_size": 1}),
        sampler,
        Node(7, "WanCoreDecode", {"tiling": "auto"}, {"vae": (3, 0), "samples": (6, 0)}),
        *_output(7, "video/WanCore_distill"),
        Node(10, "WanCoreLoRA", {"lora_name": LORA_DISTILL, "strength": 1.0, "mode": "merged"}, {"model": (1, 0)}),
        Node(11, "WanCoreNAG", {"scale": 11.0, "tau": 2.5, "alpha": 0.25}, {"embeds": (4, 0)}),
    ])


def multi_gpu_workflow() -> Workflow:
    """t2v_basic with a WanCoreContextParallel node between the model loader and the sampler (docs/parallel.md)."""
    sampler = _sampler()
    sampler.links["model"] = (10, 0)
    return Workflow("t2v_multi_gpu", "## WanCore: one video on two GPUs\n"
                    "As t2v_basic, with **WanCore Context Parallel** after the model loader: the video's tokens "
                    "are split over 2 GPUs (Ulysses 2: the attention heads are exchanged with one all-to-all), "
                    "same video as on one GPU. A worker process loads the model file on the second GPU the first "
                    "time and is reused by later prompts. Ulysses must divide the heads (12 for 1.3B, 40 for 14B); "
                    "*ring* covers the rest (e.g. 8 GPUs on 1.3B: ulysses 4, ring 2); *cfg_parallel* puts cond and "
                    "uncond on different GPUs (needs guidance != 1). See docs/parallel.md.\n" + _FILES_NOTE, [
        *_loaders(),
        _encode(PROMPT),
        Node(5, "WanCoreEmptyLatent", {"width": 832, "height": 480, "frames": 81, "batch_size": 1}),
        sampler,
        Node(7, "WanCoreDecode", {"tiling": "auto"}, {"vae": (3, 0), "samples": (6, 0)}),
        *_output(7, "video/WanCore_multi_gpu"),
        Node(10, "WanCoreContextParallel", {"devices": 2, "ulysses": 2, "ring": 1, "cfg_parallel": False},
             {"model": (1, 0)}),
    ])


def cached_workflow() -> Workflow:
    """t2v_basic with a WanCoreCache node (method wan) on the sampler's optional cache input."""
    sampler = _sampler()
    sampler.links["cache"] = (10, 0)
    return Workflow("t2v_cached", "## WanCore: text to video with the Wan cache\n"
                    "As t2v_basic, with a **WanCore Cache** node on the sampler: method *wan* (the Wan report's "
                    "CFG cache and attention cache) does about 40% less DiT work at 30 steps; the sampler shows "
                    "`cache wan: <computed>/<total> DiT evaluations` when it finishes, and the grey line under it "
                    "the expected count. Other methods: exact (same output), teacache, magcache, easycache "
                    "(faster, approximate); see docs/caches.md.\n" + _FILES_NOTE, [
        *_loaders(),
        _encode(PROMPT),
        Node(5, "WanCoreEmptyLatent", {"width": 832, "height": 480, "frames": 81, "batch_size": 1}),
        sampler,
        Node(7, "WanCoreDecode", {"tiling": "auto"}, {"vae": (3, 0), "samples": (6, 0)}),
        *_output(7, "video/WanCore_cached"),
        Node(10, "WanCoreCache", {"method": "wan"}),
    ])


def fast_workflow() -> Workflow:
    """fp8 weights + 8-bit attention + skiparse, from the options WanCoreModelLoader declares today."""
    if FAST_MODEL_VALUES:
        settings = ", ".join(f"{k} = {v}" for k, v in FAST_MODEL_VALUES.items())
        about = (f"The 1.3B fp16 file with the loader's fast options ({settings}). Skiparse approximates the "
                 "dense model, so outputs differ from t2v_basic; the grey lines under the sampler show the "
                 "attention cost it saves.")
    else:
        about = ("The loader's fast options (fp8 weights, 8-bit attention, skiparse) are not in this version "
                 "of WanCore yet: this graph samples like t2v_basic until they are.")
    return Workflow("t2v_fast", "## WanCore: fast text to video\n" + about + "\n" + _FILES_NOTE, [
        *_loaders(FAST_MODEL_VALUES),
        _encode(PROMPT),
        Node(5, "WanCoreEmptyLatent", {"width": 832, "height": 480, "frames": 81, "batch_size": 1}),
        _sampler(),
        Node(7, "WanCoreDecode", {"tiling": "auto"}, {"vae": (3, 0), "samples": (6, 0)}),
        *_output(7, "video/WanCore_fast"),
    ])


# Loader choices of t2v_fast (input name -> value); every key must be a WanCoreModelLoader input and every value
# one of its choices (tests/nodes/test_workflows.py checks it). Empty while the loader declares no fast options.
FAST_MODEL_VALUES: dict[str, Any] = {"weight_dtype": "fp8_scaled", "attention": "sage", "skiparse": "osp13"}


# ---------------------------------------------------------------- rendering

def catalog(specs) -> dict[str, Any]:
    """node type -> declaration (ours: NodeSpec; core: CoreNode); both have .inputs and .outputs."""
    out: dict[str, Any] = dict(core_nodes())
    out.update({s.node_id: s for s in specs})
    return out


def widget_inputs(decl) -> list:
    """Widget inputs in UI order: declaration order, required first, then optional (docs/comfyui.md section 8)."""
    widgets = [i for i in decl.inputs if i.is_widget]
    return [i for i in widgets if not i.optional] + [i for i in widgets if i.optional]


def socket_inputs(decl) -> list:
    return [i for i in decl.inputs if not i.is_widget]


def widget_values(node: Node, decl) -> dict[str, Any]:
    unknown = set(node.values) - {i.name for i in widget_inputs(decl)}
    if unknown:
        raise ValueError(f"{node.type} (node {node.id}): no widget input(s) {sorted(unknown)}")
    return {i.name: node.values.get(i.name, i.default) for i in widget_inputs(decl)}


def topo_order(wf: Workflow) -> list[Node]:
    by_id = {n.id: n for n in wf.nodes}
    done: list[Node] = []
    seen: set[int] = set()

    def visit(n: Node, stack: tuple = ()):
        if n.id in seen:
            return
        if n.id in stack:
            raise ValueError(f"{wf.name}: cycle through node {n.id}")
        for src, _slot in n.links.values():
            visit(by_id[src], stack + (n.id,))
        seen.add(n.id)
        done.append(n)

    for n in sorted(wf.nodes, key=lambda n: n.id):
        visit(n)
    return done


def render_api(wf: Workflow, cat: dict) -> dict:
    api: dict[str, Any] = {}
    for node in sorted(wf.nodes, key=lambda n: n.id):
        decl = cat[node.type]
        inputs: dict[str, Any] = dict(widget_values(node, decl))
        for extra, source in getattr(decl, "api_extra", ()):
            inputs[extra] = inputs[source]
        for i in socket_inputs(decl):
            if i.name in node.links:
                src, slot = node.links[i.name]
                inputs[i.name] = [str(src), slot]
        api[str(node.id)] = {"class_type": node.type, "inputs": inputs,
                             "_meta": {"title": node.title or _display_name(decl)}}
    return api


def _display_name(decl) -> str:
    return decl.display_name


# web/wancore.js draws 4 lines under these (LATENT_NODES and SAMPLERS there; ComfyUI's over a Wan model)
_ESTIMATE_NODES = ("WanCoreEmptyLatent", "WanCoreImageToVideo", "WanCoreExtendVideo", "WanCoreEmptyLatent22",
                   "WanCoreImageToVideoLatent22", "EmptyHunyuanLatentVideo", "WanCoreSampler", "KSampler",
                   "KSamplerAdvanced")


def _node_size(node: Node, decl) -> list[int]:
    slots = max(len(socket_inputs(decl)), len(decl.outputs), 0)
    height = 8 + 22 * slots
    for i in widget_inputs(decl):
        height += 110 if getattr(i, "multiline", False) else 24
    if node.type in _ESTIMATE_NODES:
        height += 4 * 15 + 8  # web/wancore.js extraHeight(0)
    if node.type == "WanCoreSampler":  # web/wancore.js: one more line for a cache, two for context windows
        height += 15 * (("cache" in node.links) + 2 * ("context" in node.links))
    elif node.type in ("KSampler", "KSamplerAdvanced"):  # the same lines for native patches upstream (room for all)
        height += 3 * 15
    width = 420 if node.type == "WanCoreTextEncode" else 360 if node.type in _ESTIMATE_NODES else 320
    if node.type == "SaveVideo":  # room for the video preview
        width, height = 420, 420
    return [width, height]


def render_ui(wf: Workflow, cat: dict) -> dict:
    order = topo_order(wf)
    by_id = {n.id: n for n in wf.nodes}
    depth: dict[int, int] = {}
    for n in order:
        depth[n.id] = max((depth[src] + 1 for src, _ in n.links.values()), default=0)

    links: list[list] = []
    in_link: dict[tuple[int, str], int] = {}
    out_links: dict[tuple[int, int], list[int]] = {}
    for target in sorted(wf.nodes, key=lambda n: n.id):
        tdecl = cat[target.type]
        sockets = socket_inputs(tdecl)
        for slot, inp in enumerate(sockets):
            if inp.name not in target.links:
                continue
            src, src_slot = target.links[inp.name]
            sdecl = cat[by_id[src].type]
            link_id = len(links) + 1
            links.append([link_id, src, src_slot, target.id, slot, sdecl.outputs[src_slot].type])
            in_link[(target.id, inp.name)] = link_id
            out_links.setdefault((src, src_slot), []).append(link_id)
        missing = set(target.links) - {i.name for i in sockets}
        if missing:
            raise ValueError(f"{wf.name}: {target.type} has no socket input(s) {sorted(missing)}")

    columns: dict[int, int] = {}
    nodes = []
    for n in sorted(wf.nodes, key=lambda n: n.id):
        decl = cat[n.type]
        size = _node_size(n, decl)
        col = min(depth[n.id], 3)  # decode -> create video -> save stack in the fourth column
        y = columns.get(col, 0)
        columns[col] = y + size[1] + 70
        values = widget_values(n, decl)
        wv: list[Any] = []
        for i in widget_inputs(decl):
            wv.append(values[i.name])
            if i.control_after_generate:
                wv.append(n.control)
        props: dict[str, Any] = {"Node name for S&R": n.type}
        file_input = MODEL_FILE_INPUTS.get(n.type)
        if file_input and values.get(file_input) in REPACKAGED_FILES:
            props["models"] = [model_hint(values[file_input])]
        entry: dict[str, Any] = {
            "id": n.id, "type": n.type, "pos": [col * 460, y], "size": size, "flags": {},
            "order": order.index(n), "mode": 0,
            "inputs": [
                {"name": i.name, "type": i.type, "link": in_link.get((n.id, i.name)),
                 **({"shape": 7} if i.optional else {})}
                for i in socket_inputs(decl)
            ],
            "outputs": [
                {"name": o.name, "type": o.type, "links": out_links.get((n.id, s), []), "slot_index": s}
                for s, o in enumerate(decl.outputs)
            ],
        }
        if n.title:
            entry["title"] = n.title
        entry["properties"] = props
        entry["widgets_values"] = wv
        if n.color:
            entry["color"], entry["bgcolor"] = n.color
        nodes.append(entry)

    note_id = max(n.id for n in wf.nodes) + 1
    nodes.append({"id": note_id, "type": "MarkdownNote", "pos": [0, -360], "size": [560, 320], "flags": {},
                  "order": len(order), "mode": 0, "inputs": [], "outputs": [], "properties": {},
                  "widgets_values": [wf.note], "color": "#432", "bgcolor": "#653"})
    return {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"https://github.com/wancore/ComfyUI-WanCore/{wf.name}")),
        "revision": 0,
        "last_node_id": note_id,
        "last_link_id": len(links),
        "nodes": nodes,
        "links": links,
        "groups": [],
        "config": {},
        "extra": {"ds": {"scale": 0.75, "offset": [80, 420]}},
        "version": 0.4,
    }


# ---------------------------------------------------------------- JSON text

def dumps(obj: Any, indent: int = 0) -> str:
    """JSON with 2-space indentation, lists of scalars kept on one line (stable, readable diffs)."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        if not obj:
            return "[]"
        if all(not isinstance(v, (dict, list)) for v in obj):
            return "[" + ", ".join(json.dumps(v, ensure_ascii=False) for v in obj) + "]"
        return "[\n" + ",\n".join(inner + dumps(v, indent + 1) for v in obj) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)


def build(specs=None) -> dict[str, str]:
    """Relative path -> file text for every shipped workflow (UI and API)."""
    if specs is None:
        specs = load_pack().nodes.NODE_SPECS
    cat = catalog(specs)
    files = {}
    for wf in workflows():
        files[f"{wf.name}.json"] = dumps(render_ui(wf, cat)) + "\n"
        files[f"api/{wf.name}.json"] = dumps(render_api(wf, cat)) + "\n"
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if a file differs")
    args = parser.parse_args(argv)
    stale = []
    for rel, text in build().items():
        path = WORKFLOWS_DIR / rel
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(rel)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    verb = "differ" if args.check else "written"
    print(f"{len(stale)} file(s) {verb}: {', '.join(stale)}" if stale else "workflows up to date")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
