"""The command line's flags (argparse). Torch-free on purpose: ``python -m wan_core --help`` must answer at once,
so the defaults shown come from ``wan_core.variants`` and the allowed values below are spelled here, each kept
equal to the library's own tuple by a test (the library's tuples live in modules that import torch)."""
from __future__ import annotations

import argparse
import os

from ..variants import PRESETS, PRESET_VARIANTS, VARIANTS, WAN21
from . import parallel, train_demo, vace, vae, wan22
from .checks import INT_RANGES
from .video_io import OUTPUT_KINDS

# Copies of torch-side tuples (a test keeps each equal to the one named)
DTYPES = ("bf16", "fp16", "fp32")  # torch dtypes by name; resolved in the command (torch loads lazily)
SOLVERS = ("unipc", "dpm++", "euler")  # wan_core.sampling.SOLVER_NAMES
CACHES = ("off", "exact", "wan", "teacache", "magcache", "easycache")  # wan_core.cache.PRESETS
ATTENTIONS = ("sdpa", "sage", "int8", "int8_fp8")  # wan_core.attention.dispatch.Attention
SKIPARSE = ("none", "osp13", "suv")  # wan_core.attention.skiparse.SCHEDULES without "custom"
WEIGHTS = ("fp8_e4m3fn", "fp8_scaled")  # the fp8 members of wan_core.dit.options.WEIGHT_FORMATS
GEMMS = ("upcast", "scaled_mm")  # wan_core.quant.fp8.GEMM_MODES
GGUF_WRITABLE_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "BF16", "F16")  # quant.gguf_writer.WRITABLE_TYPES
TEXT_ENCODER_OFFLOAD = ("release", "keep", "cpu")  # wan_core.memory.offload.TEXT_ENCODER_OFFLOAD
VAE_OFFLOAD = ("decode", "keep")  # wan_core.memory.offload.VAE_OFFLOAD
DIT_OFFLOAD = ("release", "keep")  # wan_core.memory.offload.DIT_OFFLOAD
# The command line's own choices
CONVENTIONS = ("official", "comfyui", "dpm", "lightx2v_distill")  # lightx2v_distill: custom sigmas
LORA_MODES = ("merged", "unmerged")
TILING = ("auto", "on", "off")
CONTEXT_SCHEDULES = ("static", "uniform", "looped")  # wan_core.sampling.context_windows.SCHEDULES
CONTEXT_FUSES = ("pyramid", "flat", "linear")  # wan_core.sampling.context_windows.FUSES
CONTEXT_ANCHOR = ("auto", "on", "off")
COLOUR_MATCHES = ("off", "mean-std", "histogram")  # wan_core.extension.COLOUR_MATCHES
EXTEND_CONDITIONINGS = ("auto", "clean", "replace", "svi")  # of wan_core.extension.CONDITIONINGS (image: auto)
VAE_RECIPES = train_demo.VAE_RECIPES

_DEMO = VARIANTS[PRESET_VARIANTS["demo"]].sampling
_TINY = VARIANTS[PRESET_VARIANTS["tiny-random"]].sampling


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2 (argparse prints the whole usage otherwise)
        from .errors import UsageError

        raise UsageError(f"{self.prog}: {message}")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows "(default: x)" for flags that have a real default (not None, False or a suppressed one)."""

    def _get_help_string(self, action):
        if action.default in (None, False, argparse.SUPPRESS) or "%(default)" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: ``generate``, ``train-demo`` and ``quantize`` (no torch import: ``--help`` must answer
    at once)."""
    p = _Parser(prog="python -m wan_core", description="WanCore: Wan 2.1 text-to-video.",
                formatter_class=_HelpFormatter)
    p.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    g = sub.add_parser("generate", help="generate a video from a prompt", formatter_class=_HelpFormatter)
    g.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks instead of one-line errors")
    g.add_argument("--prompt", required=True, help="what to generate; with --context-frames, segments separated by "
                   "' | ' guide successive windows (prompt travel)")
    g.add_argument("--negative-prompt", default=None, help="what to avoid (default: Wan's official negative prompt)")
    g.add_argument("--out", required=True,
                   help=f"output: {OUTPUT_KINDS}; a folder must be new, empty or hold earlier frames")
    _model_flags(g.add_argument_group("models"))
    _acceleration_flags(g.add_argument_group("acceleration (see README: faster sampling)"))
    _sampling_flags(g.add_argument_group(
        f"sampling (official Wan 2.1 defaults; demo: {_DEMO.width}x{_DEMO.height}, {_DEMO.frames} frames, "
        f"{_DEMO.steps} steps; tiny-random: {_TINY.width}x{_TINY.height}, {_TINY.frames} frames, {_TINY.steps} steps)"))
    _long_video_flags(g.add_argument_group("long video (see docs/long_video.md)"))
    vace.add_arguments(g.add_argument_group("VACE: reference, control and masked video (see docs/vace.md)"))
    parallel.add_arguments(g)
    _memory_flags(g.add_argument_group("memory (see docs/memory.md)"))
    o = g.add_argument_group("output")
    o.add_argument("--fps", type=int, default=None, help=f"frames per second, {_range('fps')} "
                                                         f"(default {WAN21.fps}; demo {_DEMO.fps})")
    o.add_argument("--tiling", choices=TILING, default="auto", help="VAE decode tiling")
    o.add_argument("--overwrite", action="store_true",
                   help="replace an existing --out file that WanCore did not write (refused otherwise)")
    t = sub.add_parser("train-demo", help="train the built-in demo model (resumable; see docs/demo_model.md)")
    train_demo.add_arguments(t)
    q = sub.add_parser("quantize", help="write a Wan DiT as a GGUF file (see docs/gguf.md)")
    q.add_argument("input", help="the Wan DiT to quantise (.safetensors, .pth or a diffusers folder)")
    q.add_argument("output", help="the new .gguf file (an existing file is never overwritten)")
    q.add_argument("--type", required=True, choices=GGUF_WRITABLE_TYPES,
                   help="GGUF type of the block weights (the types the gguf package can quantise)")
    v = sub.add_parser("vae", help="encode/decode a video with a VAE (a WF-VAE or the Wan VAE); roundtrip prints "
                                   "the PSNR (docs/wfvae.md)", formatter_class=_HelpFormatter)
    v.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks instead of one-line errors")
    vae.add_arguments(v)
    return p


def _range(name: str) -> str:
    lo, hi = INT_RANGES[name]
    return f"{lo} to {hi}"


def _model_flags(models) -> None:
    models.add_argument("--preset", choices=PRESETS, default=None,
                        help="demo: the built-in demo model (coloured shapes; the default when no model file or "
                             "--models-dir is given); tiny-random: random weights, runs in seconds, output is noise")
    models.add_argument("--models-dir", default=os.environ.get("WANCORE_MODELS_DIR"),
                        help="ComfyUI-style models folder (diffusion_models/, vae/, text_encoders/); each part is "
                             "recognised by its header, and several candidates must be chosen between explicitly")
    models.add_argument("--dit", help="Wan 2.1 T2V DiT file or diffusers folder (wins over --models-dir)")
    models.add_argument("--vae", help="Wan 2.1 VAE file (Wan2.1_VAE.pth, wan_2.1_vae.safetensors)")
    models.add_argument("--text-encoder", help="umT5-XXL file (official .pth or ComfyUI umt5_xxl_*.safetensors)")
    wan22.add_arguments(models)
    models.add_argument("--tokenizer", help="folder with spiece.model or tokenizer.json (if not embedded)")
    models.add_argument("--image", help="start image (PNG, JPEG, ...): image-to-video with a Wan 2.1 I2V DiT "
                                        "(docs/i2v.md); resized to --width x --height")
    models.add_argument("--last-image", help="last frame too: first-last-frame video with the Wan 2.1 FLF2V DiT")
    models.add_argument("--clip-vision", help="CLIP vision file for --image (clip_vision_h.safetensors, or a "
                                              "transformers folder; found in <models-dir>/clip_vision otherwise)")
    models.add_argument("--dtype", choices=["auto", *DTYPES], default="auto",
                        help="DiT weight dtype (auto: bf16 on GPU, as stored on CPU, fp16 files upcast to fp32)")
    models.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    models.add_argument("--lora", action="append", default=[], metavar="FILE[:STRENGTH]",
                        help="a LoRA file for the DiT, strength 1 unless given (e.g. style.safetensors:0.8); "
                             "repeat to stack several (docs/lora.md)")
    models.add_argument("--lora-mode", choices=list(LORA_MODES), default="merged",
                        help="merged into the weights (fp8 requantised) or a run-time low-rank branch")


def _acceleration_flags(fast) -> None:
    fast.add_argument("--attention", choices=list(ATTENTIONS), default="sdpa",
                      help="sage: SageAttention on CUDA (falls back with a warning); int8: the Sage algorithm in torch")
    fast.add_argument("--skiparse", choices=list(SKIPARSE), default="none",
                      help="training-free sparse self-attention (approximates the dense model)")
    fast.add_argument("--skiparse-k", type=int, default=4, help="sparse ratio of osp13")
    fast.add_argument("--weights", choices=list(WEIGHTS), default=None,
                      help="keep/quantise the block linears in fp8 (half the memory of bf16)")
    fast.add_argument("--gemm", choices=list(GEMMS), default="upcast",
                      help="with fp8 weights: dequantise per layer, or FP8 GEMM (SM89+ GPUs)")


def _sampling_flags(s) -> None:
    s.add_argument("--width", type=int, default=None,
                   help=f"multiple of 16, up to {INT_RANGES['width'][1]} (default {WAN21.width})")
    s.add_argument("--height", type=int, default=None,
                   help=f"multiple of 16, up to {INT_RANGES['height'][1]} (default {WAN21.height})")
    s.add_argument("--frames", type=int, default=None,
                   help=f"4n+1, up to {INT_RANGES['frames'][1]} (default {WAN21.frames})")
    s.add_argument("--steps", type=int, default=None, help=f"{_range('steps')} (default {WAN21.steps})")
    s.add_argument("--guidance", type=float, default=None,
                   help="classifier-free guidance; 1 = no negative pass "
                        f"(default {WAN21.guidance}; demo {_DEMO.guidance})")
    s.add_argument("--shift", type=float, default=None,
                   help=f"time shift; 1.3B users often use 8-12 (default {WAN21.shift}; demo {_DEMO.shift})")
    s.add_argument("--solver", choices=list(SOLVERS), default="unipc", help="flow-matching solver")
    s.add_argument("--convention", choices=list(CONVENTIONS), default="official",
                   help="timestep convention: official (integer) or comfyui (float); lightx2v_distill: the "
                        "step-distilled LoRAs' timesteps (4 steps: 1000/750/500/250 before the shift; use with "
                        "--steps 4 --guidance 1 --shift 5 --solver euler)")
    s.add_argument("--seed", type=int, default=0, help="0 to 2^64-1 (as ComfyUI)")
    s.add_argument("--nag-scale", type=float, default=1.0,
                   help="NAG: the negative prompt inside the cross-attention at --guidance 1 (1 = off; 4-step "
                        "distilled: 11); docs/lora.md")
    s.add_argument("--nag-tau", type=float, default=2.5, help="NAG normalisation threshold")
    s.add_argument("--nag-alpha", type=float, default=0.25, help="NAG blend of guided and plain attention")
    s.add_argument("--cfg-batched", action="store_true", help="cond+uncond as one batch (faster, more memory)")
    s.add_argument("--cache", choices=CACHES, default="exact",
                   help="diffusion cache: exact (same output), wan (~1.6-2x less DiT work), teacache, magcache, "
                        "easycache (~2-2.8x, approximate), off; see docs/caches.md")


def _long_video_flags(lv) -> None:
    lv.add_argument("--context-frames", type=int, default=None, metavar="N",
                    help="sample in overlapping windows of N frames (4n+1; e.g. the model's training length: 81 "
                         "for Wan, 17 for the demo), fused at every step; unset: the whole video at once")
    lv.add_argument("--context-overlap", type=int, default=None, metavar="M",
                    help="frames shared by neighbouring windows (default: half the window, in whole latent frames)")
    lv.add_argument("--context-schedule", choices=CONTEXT_SCHEDULES, default="static",
                    help="static: fixed windows; uniform: windows slide a little at every step; looped: as uniform "
                         "around a closed loop")
    lv.add_argument("--context-stride", type=int, default=1, metavar="S",
                    help="uniform/looped: also windows over every 2nd, 4th, ... frame, up to 2^(S-1)")
    lv.add_argument("--context-fuse", choices=CONTEXT_FUSES, default="pyramid",
                    help="how overlapping windows are weighted: pyramid (towards each window's middle), flat, "
                         "linear (ramps over the overlap)")
    lv.add_argument("--context-anchor", choices=CONTEXT_ANCHOR, default="auto",
                    help="latent frame 0 (one image frame) heads every window, as the model expects (auto: on, "
                         "off for looped)")
    lv.add_argument("--riflex", default="off", metavar="auto|K|off",
                    help="RIFLEx: lower the temporal RoPE frequency K so one period covers the video (auto: the "
                         "model's K, 6 for Wan, when the video is longer than its training clips)")
    lv.add_argument("--freenoise", action="store_true",
                    help="FreeNoise: each window starts from the same noise frames, shuffled (smoother long videos)")
    lv.add_argument("--extend", default=None, metavar="VIDEO",
                    help="continue this video (a video file, .webp/.gif, or a folder of PNG frames) from its last "
                         "--extend-overlap frames; the output holds its frames then the new ones (it is not changed)")
    lv.add_argument("--extend-overlap", type=int, default=None, metavar="N",
                    help="frames each new clip shares with what it continues (4n+1, default 5)")
    lv.add_argument("--clips", type=int, default=1, metavar="N",
                    help="chain N clips of --frames frames, each continuing the last (with --extend: N clips added "
                         "to the video); a prompt 'a | b | c' gives clip i the i-th part")
    lv.add_argument("--color-match", choices=COLOUR_MATCHES, default=None,
                    help="match the new frames' colour to the overlap so joins do not drift (default mean-std)")
    lv.add_argument("--extend-conditioning", choices=EXTEND_CONDITIONINGS, default="auto",
                    help="how the model is told the overlap: auto (image conditioning for I2V models, else "
                         "clean), clean (the overlap's latents held clean at timestep 0), replace (re-noised to "
                         "every step), svi (SVI 2.0 Pro LoRAs, Wan 2.2 I2V, chained --clips only)")


def _memory_flags(mem) -> None:
    mem.add_argument("--blocks-to-swap", type=int, default=0, metavar="N",
                     help="keep the last N DiT blocks in pinned CPU memory and stream them to the GPU (30 in "
                          "1.3B, 40 in 14B); same output, less VRAM")
    mem.add_argument("--prefetch", type=int, default=1, metavar="P",
                     help="with --blocks-to-swap: blocks copied ahead of the one running")
    mem.add_argument("--compile-blocks", action="store_true",
                     help="torch.compile the DiT blocks (one compile shared by all; first step slower)")
    mem.add_argument("--text-encoder-offload", choices=list(TEXT_ENCODER_OFFLOAD), default="release",
                     help="release: freed after encoding; keep: stays on the device; cpu: encode on the CPU")
    mem.add_argument("--vae-offload", choices=list(VAE_OFFLOAD), default="decode",
                     help="decode: in CPU memory until the decode")
    mem.add_argument("--dit-offload", choices=list(DIT_OFFLOAD), default="release",
                     help="release: freed after sampling, before the decode")
