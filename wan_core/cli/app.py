"""Command line: ``python -m wan_core generate --prompt "..." --out video.mp4``.

Models come from explicit paths (``--dit/--vae/--text-encoder``) or a ComfyUI-style models folder
(``--models-dir`` or ``WANCORE_MODELS_DIR``: ``diffusion_models/``, ``vae/``, ``text_encoders/``), where each part
is recognised by what the file is (its header), not by its name; ``--preset tiny-random`` runs the whole chain
on random weights in seconds (the output is noise).

Every flag is checked before a model is loaded, and every error the user can fix is one line on stderr with
exit code 2 (130 when interrupted); ``--debug`` shows the traceback instead. torch and the models are
imported inside the command, so ``--help`` answers at once.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Mapping

from ..estimate import SIZE_LIMITS
from . import parallel as parallel_cli, train_demo as train_demo_cli, wan22 as wan22_cli
from .video_io import OUTPUT_KINDS

DTYPES = ("bf16", "fp16", "fp32")  # torch dtypes by name; resolved in the command (torch loads lazily)
SOLVERS = ("unipc", "dpm++", "euler")  # wan_core.sampling.SOLVER_NAMES (a test keeps them equal)
CACHES = ("off", "exact", "wan", "teacache", "magcache", "easycache")  # wan_core.cache.PRESETS (tested equal)
VAE_RECIPES = train_demo_cli.VAE_RECIPES
# Settings a flag left unset takes, per model source (the demo's are wan_core.demo.DEMO_DEFAULTS; a test keeps
# them equal without importing torch here).
TINY_DEFAULTS = {"width": 64, "height": 64, "frames": 9, "steps": 4, "guidance": 5.0, "shift": 5.0, "fps": 16}
FULL_DEFAULTS = {"width": 832, "height": 480, "frames": 81, "steps": 50, "guidance": 5.0, "shift": 5.0, "fps": 16}
DEMO_DEFAULTS = {"width": 64, "height": 64, "frames": 17, "steps": 20, "guidance": 6.0, "shift": 3.0, "fps": 8,
                 "negative_prompt": ""}
PRESETS = ("demo", "tiny-random")
# Accepted ranges (inclusive) besides the sizes (wan_core.estimate.SIZE_LIMITS): seeds as ComfyUI's seed widgets
# and make_noise, steps as the sampler node, fps as ComfyUI's Create Video node.
INT_RANGES = {"seed": (0, 2**64 - 1), "steps": (1, 1000), "fps": (1, 120), "skiparse_k": (1, 64),
              **{k: SIZE_LIMITS[k] for k in ("width", "height", "frames")}}
EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 2, 1, 130
PART_LABELS = {"dit": "DiT", "vae": "VAE", "text_encoder": "text encoder", "clip_vision": "CLIP vision"}


class UsageError(Exception):
    """A bad flag or value: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2 (argparse prints the whole usage otherwise)
        raise UsageError(f"{self.prog}: {message}")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows "(default: x)" for flags that have a real default (not None, False or a suppressed one)."""

    def _get_help_string(self, action):
        if action.default in (None, False, argparse.SUPPRESS) or "%(default)" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (no torch import: ``--help`` must answer at once)."""
    p = _Parser(prog="python -m wan_core", description="WanCore: Wan 2.1 text-to-video.",
                formatter_class=_HelpFormatter)
    p.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    g = sub.add_parser("generate", help="generate a video from a prompt", formatter_class=_HelpFormatter)
    g.set_defaults(func=cmd_generate)
    g.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks instead of one-line errors")
    g.add_argument("--prompt", required=True, help="what to generate")
    g.add_argument("--negative-prompt", default=None, help="what to avoid (default: Wan's official negative prompt)")
    g.add_argument("--out", required=True,
                   help=f"output: {OUTPUT_KINDS}; a folder must be new, empty or hold earlier frames")
    models = g.add_argument_group("models")
    models.add_argument("--preset", choices=PRESETS, default=None,
                        help="demo: the built-in demo model (coloured shapes; the default when no model file or "
                             "--models-dir is given); tiny-random: random weights, runs in seconds, output is noise")
    models.add_argument("--models-dir", default=os.environ.get("WANCORE_MODELS_DIR"),
                        help="ComfyUI-style models folder (diffusion_models/, vae/, text_encoders/); each part is "
                             "recognised by its header, and several candidates must be chosen between explicitly")
    models.add_argument("--dit", help="Wan 2.1 T2V DiT file or diffusers folder (wins over --models-dir)")
    models.add_argument("--vae", help="Wan 2.1 VAE file (Wan2.1_VAE.pth, wan_2.1_vae.safetensors)")
    models.add_argument("--text-encoder", help="umT5-XXL file (official .pth or ComfyUI umt5_xxl_*.safetensors)")
    wan22_cli.add_arguments(models)
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
    models.add_argument("--lora-mode", choices=["merged", "unmerged"], default="merged",
                        help="merged into the weights (fp8 requantised) or a run-time low-rank branch")
    fast = g.add_argument_group("acceleration (see README: faster sampling)")
    fast.add_argument("--attention", choices=["sdpa", "sage", "int8", "int8_fp8"], default="sdpa",
                      help="sage: SageAttention on CUDA (falls back with a warning); int8: the Sage algorithm in torch")
    fast.add_argument("--skiparse", choices=["none", "osp13", "suv"], default="none",
                      help="training-free sparse self-attention (approximates the dense model)")
    fast.add_argument("--skiparse-k", type=int, default=4, help="sparse ratio of osp13")
    fast.add_argument("--weights", choices=["fp8_e4m3fn", "fp8_scaled"], default=None,
                      help="keep/quantise the block linears in fp8 (half the memory of bf16)")
    fast.add_argument("--gemm", choices=["upcast", "scaled_mm"], default="upcast",
                      help="with fp8 weights: dequantise per layer, or FP8 GEMM (SM89+ GPUs)")
    s = g.add_argument_group("sampling (official Wan 2.1 defaults; demo: 64x64, 17 frames, 20 steps; "
                             "tiny-random: 64x64, 9 frames, 4 steps)")
    s.add_argument("--width", type=int, default=None, help="multiple of 16, up to 8192 (default 832)")
    s.add_argument("--height", type=int, default=None, help="multiple of 16, up to 8192 (default 480)")
    s.add_argument("--frames", type=int, default=None, help="4n+1, up to 2001 (default 81)")
    s.add_argument("--steps", type=int, default=None, help="1 to 1000 (default 50)")
    s.add_argument("--guidance", type=float, default=None,
                   help="classifier-free guidance; 1 = no negative pass "
                        f"(default {FULL_DEFAULTS['guidance']}; demo {DEMO_DEFAULTS['guidance']})")
    s.add_argument("--shift", type=float, default=None,
                   help="time shift; 1.3B users often use 8-12 (default 5.0; demo 3.0)")
    s.add_argument("--solver", choices=list(SOLVERS), default="unipc", help="flow-matching solver")
    s.add_argument("--convention", choices=["official", "comfyui", "dpm", "lightx2v_distill"], default="official",
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
    parallel_cli.add_arguments(g)
    mem = g.add_argument_group("memory (see docs/memory.md)")
    mem.add_argument("--blocks-to-swap", type=int, default=0, metavar="N",
                     help="keep the last N DiT blocks in pinned CPU memory and stream them to the GPU (30 in "
                          "1.3B, 40 in 14B); same output, less VRAM")
    mem.add_argument("--prefetch", type=int, default=1, metavar="P",
                     help="with --blocks-to-swap: blocks copied ahead of the one running")
    mem.add_argument("--compile-blocks", action="store_true",
                     help="torch.compile the DiT blocks (one compile shared by all; first step slower)")
    mem.add_argument("--text-encoder-offload", choices=["release", "keep", "cpu"], default="release",
                     help="release: freed after encoding; keep: stays on the device; cpu: encode on the CPU")
    mem.add_argument("--vae-offload", choices=["decode", "keep"], default="decode",
                     help="decode: in CPU memory until the decode")
    mem.add_argument("--dit-offload", choices=["release", "keep"], default="release",
                     help="release: freed after sampling, before the decode")
    o = g.add_argument_group("output")
    o.add_argument("--fps", type=int, default=None, help="frames per second, 1 to 120 (default 16; demo 8)")
    o.add_argument("--tiling", choices=["auto", "on", "off"], default="auto", help="VAE decode tiling")
    t = sub.add_parser("train-demo", help="train the built-in demo model (resumable; see docs/demo_model.md)")
    t.set_defaults(func=lambda a: __import__("wan_core.demo.train", fromlist=["main"]).main(a))
    train_demo_cli.add_arguments(t)
    return p


# ---------------------------------------------------------------- checks before anything is loaded

def check_args(args) -> list[str]:
    """Every problem with the parsed ``generate`` flags that can be seen without loading a model, each as
    ``name=value: what is expected`` (the pipeline's wording)."""
    from ..text.prompt import prompt_problem
    from .video_io import output_problem

    problems = []
    for name, (lo, hi) in INT_RANGES.items():
        value = getattr(args, name)
        if value is not None and not lo <= value <= hi:
            problems.append(f"{name}={value}: must be an integer from {lo} to {hi}")
    for name in ("guidance", "shift"):
        if not math.isfinite(getattr(args, name)):
            problems.append(f"{name}={getattr(args, name)}: must be a finite number")
    for problem in (prompt_problem(args.prompt, "--prompt"),
                    None if args.negative_prompt is None else
                    prompt_problem(args.negative_prompt, "--negative-prompt", allow_empty=True)):
        if problem:
            problems.append(problem)
    out = output_problem(args.out)
    if out:
        problems.append(f"--out {args.out!r}: {out}" if not str(args.out).strip() else f"--out {out}")
    if args.nag_scale != 1.0:
        try:
            nag_config(args)
        except ValueError as e:
            problems.append(str(e))
        if args.guidance is not None and args.guidance != 1.0:
            problems.append(f"--nag-scale {args.nag_scale:g} applies the negative prompt at guidance 1, but "
                            f"guidance is {args.guidance:g}: add --guidance 1 or drop --nag-scale")
    for flag, spec in [("--lora", spec) for spec in args.lora] + wan22_cli.expert_loras(args):
        problem = lora_problem(spec)
        if problem:
            problems.append(problem.replace("--lora", flag, 1))
    problems += parallel_cli.problems(args)
    if args.blocks_to_swap < 0:
        problems.append(f"--blocks-to-swap {args.blocks_to_swap}: must be an integer >= 0")
    if args.prefetch < 0:
        problems.append(f"--prefetch {args.prefetch}: must be an integer >= 0 (blocks copied ahead; 1 is usual)")
    problems += image_problems(args)
    if args.gemm == "scaled_mm" and not args.weights:
        problems.append("--gemm scaled_mm needs fp8 weights: add --weights fp8_scaled (or fp8_e4m3fn)")
    given = [f"--{flag.replace('_', '-')}" for flag in ("dit", "vae", "text_encoder") if getattr(args, flag)]
    if args.models_dir and args.models_dir != os.environ.get("WANCORE_MODELS_DIR"):  # the variable is a default
        given.append("--models-dir")
    if args.preset is not None and given:
        problems.append(f"--preset {args.preset} brings its own models: drop {' / '.join(given)} or the preset")
    if args.preset is None:
        for flag in ("dit", "vae", "text_encoder", "tokenizer"):
            value = getattr(args, flag)
            if value and not Path(value).expanduser().exists():
                problems.append(f"--{flag.replace('_', '-')} {value}: no such file or folder")
    return problems


def image_problems(args) -> list[str]:
    """--image / --last-image / --clip-vision that can be refused before loading anything (docs/i2v.md)."""
    problems = []
    image, last, clip = (getattr(args, n, None) for n in ("image", "last_image", "clip_vision"))
    if last and not image:
        problems.append("--last-image needs --image (the first frame) too")
    if clip and not image:
        problems.append("--clip-vision is used with --image only")
    if image and args.preset is not None:
        problems.append(f"--image needs an image-to-video model; --preset {args.preset} is text-to-video: pass "
                        f"--models-dir or --dit/--vae/--text-encoder/--clip-vision")
    for flag, value in (("--image", image), ("--last-image", last), ("--clip-vision", clip)):
        if value and not Path(value).expanduser().exists():
            problems.append(f"{flag} {value}: no such file or folder")
        elif value and flag != "--clip-vision":
            from ..i2v import load_image

            try:
                load_image(value)  # small next to the models: read now, so a bad file fails before loading
            except ValueError as e:
                problems.append(f"{flag} {e}")
    return problems


def parse_lora(spec: str) -> tuple[str, float]:
    """``FILE[:STRENGTH]`` -> (file, strength); a tail after the last ':' that is not a number belongs to the
    file name (e.g. a Windows drive letter)."""
    path, sep, tail = spec.rpartition(":")
    if sep and path:
        try:
            return path, float(tail)
        except ValueError:
            pass
    return spec, 1.0


def lora_problem(spec: str) -> str | None:
    path, strength = parse_lora(spec)
    if not math.isfinite(strength):
        return f"--lora {spec}: the strength must be a finite number"
    if not Path(path).expanduser().is_file():
        return f"--lora {spec}: no such file {path!r}"
    return None


def apply_loras(args, dit) -> None:
    """The --lora files on the DiT (on each expert of --dit-high/--dit-low), in order, each with its strength; one
    line each on stderr (with unused keys)."""
    import warnings

    from ..lora import LoraWarning, apply_lora

    for spec, label, model in wan22_cli.lora_targets(args, dit):  # --lora-high/--lora-low: one expert each
        path, strength = parse_lora(spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LoraWarning)  # the summary line below names the unused keys
            applied = apply_lora(model, Path(path).expanduser(), strength=strength, merge=args.lora_mode == "merged")
        print(f"wan_core: {label}{applied.summary()}", file=sys.stderr)


def uses_negative(args) -> bool:
    """The negative prompt is encoded for CFG (guidance != 1) or for NAG."""
    return args.guidance != 1.0 or args.nag_scale != 1.0


def nag_config(args):
    from ..sampling.nag import NAGConfig

    return NAGConfig(args.nag_scale, args.nag_tau, args.nag_alpha)


def attach_nag(args, dit, uncond):
    """NAG hooks on the DiT for the rest of the run when --nag-scale is not 1 (docs/lora.md section 6)."""
    from ..sampling.nag import NAGAttention

    config = nag_config(args)
    return NAGAttention(dit, uncond, config).__enter__() if config.active else None


def _device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise UsageError(f"--device {name!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine; use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s) "
                         f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {name}: MPS (Apple GPU) is not available on this machine; use --device cpu")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise UsageError(f"--device {name}: use auto, cpu, cuda, cuda:N or mps")
    return dev


def resolve_models(args) -> dict:
    """``{"dit": ModelFile, "vae": ..., "text_encoder": ...}``: explicit paths win, the rest is found in
    ``--models-dir`` by header. Reads headers only; raises UsageError (one line) for a wrong or ambiguous file."""
    from .model_files import PARTS, find_model, identify

    found: dict = {}
    image = getattr(args, "image", None)
    dit_kind = ("dit_flf2v" if getattr(args, "last_image", None) else "dit_i2v") if image else "dit"
    for part in PARTS + (("clip_vision",) if image else ()):
        explicit = getattr(args, part)
        flag = "--" + part.replace("_", "-")
        kind = dit_kind if part == "dit" else part  # --image: an I2V / FLF2V DiT (docs/i2v.md section 8)
        if explicit:
            f = identify(explicit, kind)
            if not f.ok:
                raise UsageError(f"{flag} {explicit}: {f.problem}")
        elif args.models_dir:
            try:
                f = find_model(args.models_dir, kind)
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


def check_memory(args, device, dit_size: str | None, layers: int | None = None) -> None:
    """Refuse, before loading, a size that cannot fit in the device's memory (``wan_core.estimate``). Blocks
    swapped to RAM (--blocks-to-swap, ``layers`` = the DiT's block count) do not count on the device, except the
    prefetch + 1 in flight (docs/memory.md section 1)."""
    from ..estimate import fit_problem, memory_needs, total_memory

    ram = total_memory("cpu")
    compute = total_memory(device) if device.type != "cpu" else ram
    dtype = "fp8" if args.weights else ("fp32" if device.type == "cpu" else "bf16")
    swapped = min(getattr(args, "blocks_to_swap", 0), layers or 0) if device.type == "cuda" else 0
    if compute is not None and swapped and layers:
        weights = memory_needs(args.width, args.height, args.frames, model=dit_size, dtype=dtype)["weights"]
        compute += int(weights / layers * (swapped - min(args.prefetch + 1, swapped)))
    problem = fit_problem(args.width, args.height, args.frames, compute_bytes=compute, host_bytes=ram,
                          model=dit_size, dtype=dtype)
    if problem:
        raise UsageError(problem)


# ---------------------------------------------------------------- running

def _tqdm_progress(desc: str, unit: str = "tensor", leave: bool = False):
    """A ``(done, total)`` callback drawing a tqdm bar, created with its total on the first call (so it shows
    from the start) and closed when done == total; a restart with another total (tiled decode after an
    out-of-memory error) resets it."""
    from tqdm.auto import tqdm

    bar = None

    def callback(done: int, total: int) -> None:
        nonlocal bar
        if bar is None or bar.total != total:
            if bar is not None:
                bar.close()
            bar = tqdm(total=total, desc=desc, unit=unit, leave=leave)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return callback


def _accel(args) -> dict:
    """``load_dit`` acceleration keywords from the flags."""
    return {"attention": args.attention, "skiparse": args.skiparse, "skiparse_k": args.skiparse_k,
            "weights": args.weights, "gemm": args.gemm}


def load_models(args, device, files: dict | None = None):
    """(dit, vae, text_encoder) for the parsed arguments; ``files`` from ``resolve_models`` (None: resolve)."""
    import torch

    from .. import load_dit, load_text_encoder, load_vae
    from ..demo import tiny_random_models

    if args.preset == "tiny-random":
        dit, vae, te = tiny_random_models(seed=0, device=device)
        if args.attention != "sdpa" or args.skiparse != "none" or args.weights:
            dit = load_dit(dit.state_dict(), config=dit.config, device=device, **_accel(args))
        return dit, vae, te
    files = files or resolve_models(args)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    dtype = dtypes.get(args.dtype) if args.dtype != "auto" else (torch.bfloat16 if device.type == "cuda" else None)
    if dtype is None and device.type == "cpu" and not args.weights:
        from ..checkpoint import stored_float_dtype
        from ..dit.loader import official_state_dict

        if stored_float_dtype(official_state_dict(files["dit"].path)) == torch.float16:
            dtype = torch.float32  # CPUs have no fast fp16 matmul (ComfyUI upcasts too); the demo DiT is stored fp16
    te_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    policy = offload_policy(args)  # where each part waits until its stage (docs/memory.md section 3)
    swapping = getattr(args, "blocks_to_swap", 0) and device.type == "cuda"  # swapped blocks never touch the GPU
    dit = load_dit(files["dit"].path, dtype=dtype, device="cpu" if swapping else policy.load_device("dit", device),
                   progress=_tqdm_progress("loading DiT"), **_accel(args))
    vae = load_vae(files["vae"].path, dtype=torch.float32 if device.type == "cpu" else torch.bfloat16,
                   device=policy.load_device("vae", device))
    te = load_text_encoder(files["text_encoder"].path, tokenizer=args.tokenizer, dtype=te_dtype,
                           device=policy.load_device("text_encoder", device),
                           progress=_tqdm_progress("loading text encoder"))
    return dit, vae, te


def offload_policy(args):
    """The --*-offload flags as a ``wan_core.memory.offload.OffloadPolicy``."""
    from ..memory.offload import OffloadPolicy

    return OffloadPolicy(text_encoder=getattr(args, "text_encoder_offload", "release"),
                         vae=getattr(args, "vae_offload", "decode"), dit=getattr(args, "dit_offload", "release"))


def dit_block_count(files: dict | None) -> int | None:
    """The DiT's block count from its file header (None for the tiny-random preset)."""
    if not files or "dit" not in files:
        return None
    from ..memory import file_block_count

    return file_block_count(files["dit"].path)


def prepare_dit(args, dit, device):
    """The DiT on ``device`` for sampling: block swap (--blocks-to-swap/--prefetch) or a plain move, then
    --compile-blocks. Notes (swap a no-op on the CPU, compile unavailable) go to stderr as one line."""
    from ..memory import compile_blocks, enable_block_swap
    from ..memory.offload import move

    if args.blocks_to_swap and device.type == "cuda":
        swap = enable_block_swap(dit, min(args.blocks_to_swap, len(dit.blocks)), args.prefetch, device=device)
        print(f"wan_core: {swap} ({swap.offload_bytes() / 2**30:.2f} GiB of blocks in pinned RAM)", file=sys.stderr)
    else:
        move(dit, device)
    if args.compile_blocks:
        compile_blocks(dit, device=device)  # a CompileUnavailableWarning says why not, in one line


def output_metadata(args, cfg, files: dict | None) -> dict:
    """The prompt, seed and settings stored in the output file (``wan_core.cli.video_io.read_metadata``)."""
    from .. import __version__

    meta = {"prompt": args.prompt, "negative_prompt": cfg.negative_prompt, "seed": args.seed, "steps": args.steps,
            "guidance": args.guidance, "shift": args.shift, "solver": args.solver, "convention": args.convention,
            "width": args.width, "height": args.height, "frames": args.frames, "fps": args.fps,
            "attention": args.attention, "skiparse": args.skiparse, "weights": args.weights,
            "loras": [f"{Path(p).name}:{w:g}" for p, w in map(parse_lora, args.lora)],
            "nag": [args.nag_scale, args.nag_tau, args.nag_alpha] if args.nag_scale != 1.0 else None,
            "models": ({part: f.path.name for part, f in files.items()} if files else args.preset),
            "generator": f"ComfyUI-WanCore {__version__} (python -m wan_core)"}
    for flag, spec in wan22_cli.expert_loras(args):  # "loras_high" / "loras_low"
        path, strength = parse_lora(spec)
        meta.setdefault(f"loras_{flag.rsplit('-', 1)[1]}", []).append(f"{Path(path).name}:{strength:g}")
    return meta


def image_size_default(args) -> None:
    """--image given without --width and --height: the size the official I2V code picks for that image (its
    aspect ratio at about 832x480 pixels, ``wan_core.i2v.official_size``), said on stderr."""
    if not getattr(args, "image", None) or args.width is not None or args.height is not None:
        return
    from ..i2v import load_image, official_size

    try:
        image = load_image(args.image)
    except ValueError:
        return  # check_args names the problem
    args.width, args.height = official_size(image.shape[1], image.shape[2])
    print(f"wan_core: --image {image.shape[2]}x{image.shape[1]}: video size {args.width}x{args.height} (its "
          f"aspect ratio at about 832x480, as the official I2V code picks; --width/--height to choose)",
          file=sys.stderr)


def encode_image_condition(args, cfg, dit, vae, files, device):
    """--image (and --last-image) -> the ``ImageCondition`` of ``cfg``'s size: the request checked against the DiT
    first, then the CLIP vision encoder loaded, used and released, and the frames VAE-encoded (docs/i2v.md)."""
    import torch

    from ..i2v import load_clip_vision
    from ..i2v import check_image_request, image_condition, load_image
    from ..memory.offload import move, release

    try:
        image = load_image(args.image)
        last = load_image(args.last_image) if args.last_image else None
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
                                    tiling=args.tiling, progress=_tqdm_progress("encoding image", "chunk"))
    move(vae, rest)
    if clip is not None:
        release(clip.model)  # not needed again in this run
    return condition


def cmd_generate(args) -> int:
    if args.preset is None and not (args.dit or args.vae or args.text_encoder or args.models_dir):
        args.preset = "demo"
        print("wan_core: no model files given: using the built-in demo model (wancore-demo: coloured shapes "
              "moving in four directions, docs/demo_model.md); pass --models-dir or --dit/--vae/--text-encoder "
              "for Wan 2.1", file=sys.stderr)
    wan22_cli.claim_ti2v_image(args)  # --image with a TI2V-5B DiT: its first frame
    image_size_default(args)  # --image without --width/--height: the official I2V size for the image
    presets: dict[str, Mapping[str, object]] = {"tiny-random": TINY_DEFAULTS, "demo": DEMO_DEFAULTS}
    defaults = wan22_cli.defaults(args, presets.get(args.preset, FULL_DEFAULTS))
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    problems = check_args(args) + wan22_cli.problems(args)
    if problems:
        raise UsageError("; ".join(problems))

    import torch
    from tqdm.auto import tqdm

    from ..pipeline import GenerationConfig, WanPipeline
    from ..sampling import DEFAULT_NEGATIVE_PROMPT, distill_sigmas
    from .video_io import write_video

    cfg = GenerationConfig(
        prompt=args.prompt, negative_prompt=args.negative_prompt, width=args.width, height=args.height,
        frames=args.frames, steps=args.steps, guidance=args.guidance, shift=args.shift, solver=args.solver,
        seed=args.seed, convention=args.convention, batched_cfg=args.cfg_batched,
    )
    try:
        if args.convention == "lightx2v_distill":
            cfg = cfg.replace(convention="custom", sigmas=tuple(distill_sigmas(args.steps, args.shift)))
        cfg.validate()
    except ValueError as e:
        raise UsageError(str(e)) from None
    wan22_cli.prepare_files(args)  # --dit-high stands for the DiT; a TI2V-5B DiT takes the Wan 2.2 VAE
    rank, device = parallel_cli.setup(_device(args.device))  # torchrun: join the group, one GPU per rank
    files = None
    if args.preset == "demo":
        files = demo_files()
    elif args.preset != "tiny-random":
        files = resolve_models(args)
        for part, f in files.items():
            print(f"wan_core: {PART_LABELS[part]}: {f.path} ({f.what})", file=sys.stderr)
    from ..memory import check_swap_options

    layers = dit_block_count(files)
    try:  # block swap options against the device and the file's block count, before loading
        note = check_swap_options(args.blocks_to_swap, args.prefetch, device, layers)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if note:
        print(f"wan_core: {note}", file=sys.stderr)
    check_memory(args, device, files["dit"].size if files else None, layers)

    t0 = time.perf_counter()
    dit, vae, te = load_models(args, device, files)
    dit = wan22_cli.with_low_noise_expert(args, dit, _accel(args))  # --dit-low: a WanMoE
    apply_loras(args, dit)
    if args.preset == "tiny-random":
        print("wan_core: preset tiny-random uses RANDOM weights: the output is noise (it exercises the chain).",
              file=sys.stderr)
    from ..memory.accounting import MemoryMeter, model_bytes
    from ..memory.offload import move, release
    from ..pipeline import check_models

    check_models(dit, vae, te)  # before the text encoder runs
    policy = offload_policy(args)
    meter = MemoryMeter(device)  # peak per stage, printed at the end (docs/memory.md section 5)
    pipe = WanPipeline(None, vae, te)
    condition = None
    first_frame = wan22_cli.first_frame(args, cfg, vae, device)  # TI2V-5B --image (docs/wan22.md section 6)
    if getattr(args, "image", None):  # before the text encoder: a bad image or model pairing fails first
        condition = encode_image_condition(args, cfg, dit, vae, files, device)
    with torch.inference_mode():
        with meter.stage("text encoding", model_bytes(te, device)):
            cond, uncond = pipe.encode_prompts(cfg.prompts, cfg.negative_prompt, need_negative=uses_negative(args))
            attach_nag(args, dit, uncond)  # NAG hooks when --nag-scale is not 1
        if policy.text_encoder == "release":  # the embeddings are all the sampler needs
            release(te)
            pipe.text_encoder = te = None
        wan22_cli.prepare_dit(args, dit, device, prepare_dit)
        pipe.dit = parallel_cli.wrap(dit, args)
        with meter.stage("sampling", model_bytes(dit, device)):
            with tqdm(total=cfg.steps, desc="sampling", unit="step", disable=rank > 0) as bar:
                latents = pipe.sample_latents(cond, uncond, cfg, callback=lambda i, n, x, x0: bar.update(1),
                                              cache=args.cache, image=condition,
                                              first_frame=first_frame)
        print(pipe.cache_report.line(), file=sys.stderr)  # "cache <preset>: <computed>/<total> DiT evaluations"
        if policy.dit == "release":
            release(dit)
            pipe.dit = dit = None
        move(vae, device)
        with meter.stage("decoding", model_bytes(vae, device)):
            # torchrun: the VAE's tiles split over the ranks, the video on rank 0 (None on the others)
            video = parallel_cli.decode(pipe, latents, args.tiling, _tqdm_progress("decoding", "chunk", leave=True))
    if rank == 0:
        for line in meter.lines():
            print(f"wan_core: {line}", file=sys.stderr)
    if not parallel_cli.is_writer():  # torchrun: only rank 0 writes the video
        parallel_cli.finish()
        return 0
    parallel_cli.finish()
    negative = DEFAULT_NEGATIVE_PROMPT if cfg.negative_prompt is None else cfg.negative_prompt
    meta = output_metadata(args, cfg.replace(negative_prompt=negative), files)
    written = write_video(video[0], args.out, fps=args.fps, metadata=meta)
    print(f"wrote {written} ({cfg.frames} frames, {cfg.width}x{cfg.height}, {args.fps} fps) in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- errors

def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _is_interrupt(e: BaseException) -> bool:
    # KeyboardInterrupt, or the project's one interrupt exception (sampling, VAE, text encoding raise it)
    from ..progress import Interrupted

    return isinstance(e, (KeyboardInterrupt, Interrupted))


def _is_out_of_memory(e: BaseException) -> bool:
    text = str(e).lower()
    return (isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError"
            or (isinstance(e, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)))


def describe_error(e: BaseException) -> tuple[str, int]:
    """(one line for stderr, exit code) for an exception that escaped a command."""
    if isinstance(e, UsageError):
        return f"error: {e}", EXIT_USAGE
    if _is_interrupt(e):
        return "interrupted", EXIT_INTERRUPTED
    if _is_out_of_memory(e):
        return (f"error: out of memory ({_first_line(e)[:200]}); try a smaller size or fewer frames, "
                f"--weights fp8_scaled, --tiling on, or another --device"), EXIT_USAGE
    if isinstance(e, (ValueError, OSError)):  # CheckpointError, TokenizerError, NonFiniteError are ValueErrors
        return f"error: {_first_line(e)}", EXIT_USAGE
    if isinstance(e, ImportError):
        return f"error: {_first_line(e)} (a missing optional package; see README: install)", EXIT_USAGE
    return (f"error: internal error {type(e).__name__}: {_first_line(e)} (run with --debug for the traceback and "
            f"please report it)"), EXIT_INTERNAL


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        return args.func(args)
    except BaseException as e:  # every error becomes one line; --debug shows the traceback
        if isinstance(e, SystemExit):  # --help
            raise
        if args is not None and getattr(args, "debug", False):
            raise
        line, code = describe_error(e)
        print(line, file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
