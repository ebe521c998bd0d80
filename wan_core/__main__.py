"""Command line: ``python -m wan_core generate --prompt "..." --out video.mp4``.

Models come from explicit paths (``--dit/--vae/--text-encoder``) or a ComfyUI-style models folder
(``--models-dir`` or ``WANCORE_MODELS_DIR``: ``diffusion_models/``, ``vae/``, ``text_encoders/``);
``--preset tiny-random`` runs the whole chain on random weights in seconds (the output is noise).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TINY_DEFAULTS = {"width": 64, "height": 64, "frames": 9, "steps": 4}
FULL_DEFAULTS = {"width": 832, "height": 480, "frames": 81, "steps": 50}


class UsageError(Exception):
    """A bad flag or value: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2 (argparse prints the whole usage otherwise)
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    from .sampling import SOLVER_NAMES

    p = _Parser(prog="python -m wan_core", description="WanCore: Wan 2.1 text-to-video.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    g = sub.add_parser("generate", help="generate a video from a prompt")
    g.add_argument("--prompt", required=True, help="what to generate")
    g.add_argument("--negative-prompt", default=None, help="default: Wan's official negative prompt")
    g.add_argument("--out", required=True, help="output: .mp4/.mkv/.webm, .webp/.gif, or a folder for PNGs")
    models = g.add_argument_group("models")
    models.add_argument("--preset", choices=["tiny-random"], default=None,
                        help="tiny-random: random weights, runs in seconds, output is noise")
    models.add_argument("--models-dir", default=os.environ.get("WANCORE_MODELS_DIR"),
                        help="ComfyUI-style models folder (diffusion_models/, vae/, text_encoders/)")
    models.add_argument("--dit", help="Wan 2.1 T2V DiT file or diffusers folder")
    models.add_argument("--vae", help="Wan 2.1 VAE file (Wan2.1_VAE.pth, wan_2.1_vae.safetensors)")
    models.add_argument("--text-encoder", help="umT5-XXL file (official .pth or ComfyUI umt5_xxl_*.safetensors)")
    models.add_argument("--tokenizer", help="folder with spiece.model or tokenizer.json (if not embedded)")
    models.add_argument("--dtype", choices=["auto", *DTYPES], default="auto",
                        help="DiT weight dtype (auto: bf16 on GPU, as stored on CPU)")
    models.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    fast = g.add_argument_group("acceleration (see README: faster sampling)")
    fast.add_argument("--attention", choices=["sdpa", "sage", "int8", "int8_fp8"], default="sdpa",
                      help="sage: SageAttention on CUDA (falls back with a warning); int8: the Sage algorithm in torch")
    fast.add_argument("--skiparse", choices=["none", "osp13", "suv"], default="none",
                      help="training-free sparse self-attention (approximates the dense model)")
    fast.add_argument("--skiparse-k", type=int, default=4, help="sparse ratio of osp13 (default 4)")
    fast.add_argument("--weights", choices=["fp8_e4m3fn", "fp8_scaled"], default=None,
                      help="keep/quantise the block linears in fp8 (half the memory of bf16)")
    fast.add_argument("--gemm", choices=["upcast", "scaled_mm"], default="upcast",
                      help="with fp8 weights: dequantise per layer, or FP8 GEMM (SM89+ GPUs)")
    s = g.add_argument_group("sampling (official Wan 2.1 defaults)")
    s.add_argument("--width", type=int, default=None, help="multiple of 16 (default 832)")
    s.add_argument("--height", type=int, default=None, help="multiple of 16 (default 480)")
    s.add_argument("--frames", type=int, default=None, help="4n+1 (default 81)")
    s.add_argument("--steps", type=int, default=None, help="default 50")
    s.add_argument("--guidance", type=float, default=5.0)
    s.add_argument("--shift", type=float, default=5.0, help="1.3B users often use 8-12")
    s.add_argument("--solver", choices=list(SOLVER_NAMES), default="unipc")
    s.add_argument("--convention", choices=["official", "comfyui", "dpm"], default="official",
                   help="timestep convention: official (integer) or comfyui (float)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--cfg-batched", action="store_true", help="cond+uncond as one batch (faster, more memory)")
    o = g.add_argument_group("output")
    o.add_argument("--fps", type=int, default=16)
    o.add_argument("--tiling", choices=["auto", "on", "off"], default="auto", help="VAE decode tiling")
    return p


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise UsageError(f"--device {name!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine; use --device cpu")
    return dev


def _find_model(models_dir: Path, folders: tuple[str, ...], must: tuple[str, ...], what: str) -> Path:
    candidates = []
    for folder in folders:
        root = models_dir / folder
        if root.is_dir():
            candidates += [p for p in sorted(root.rglob("*"))
                           if p.suffix in (".safetensors", ".pth", ".pt", ".sft")
                           and all(m in p.name.lower() for m in must)]
    if not candidates:
        raise UsageError(f"no {what} found in {models_dir} ({', '.join(folders)}); pass its path explicitly")
    return candidates[0]


def _tqdm_progress(desc: str):
    """A ``(done, total)`` loading callback drawing a tqdm bar (closed when done == total)."""
    from tqdm.auto import tqdm

    bar = None

    def callback(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc=desc, unit="tensor", leave=False)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return callback


def _accel(args) -> dict:
    """``load_dit`` acceleration keywords from the flags."""
    return {"attention": args.attention, "skiparse": args.skiparse, "skiparse_k": args.skiparse_k,
            "weights": args.weights, "gemm": args.gemm}


def load_models(args, device: torch.device):
    """(dit, vae, text_encoder) for the parsed arguments."""
    from . import load_dit, load_text_encoder, load_vae
    from .demo import tiny_random_models

    if args.preset == "tiny-random":
        dit, vae, te = tiny_random_models(seed=0, device=device)
        if args.attention != "sdpa" or args.skiparse != "none" or args.weights:
            dit = load_dit(dit.state_dict(), config=dit.config, device=device, **_accel(args))
        return dit, vae, te
    paths = {"dit": args.dit, "vae": args.vae, "text_encoder": args.text_encoder}
    if args.models_dir:
        md = Path(args.models_dir).expanduser()
        paths["dit"] = paths["dit"] or _find_model(md, ("diffusion_models", "unet"), ("t2v",), "Wan T2V DiT")
        paths["vae"] = paths["vae"] or _find_model(md, ("vae",), ("wan",), "Wan VAE")
        paths["text_encoder"] = paths["text_encoder"] or _find_model(md, ("text_encoders", "clip"), ("umt5",),
                                                                     "umT5 text encoder")
    missing = [f"--{k.replace('_', '-')}" for k, v in paths.items() if not v]
    if missing:
        raise UsageError(f"missing {', '.join(missing)} (or --models-dir, or --preset tiny-random)")
    dtype = DTYPES.get(args.dtype) if args.dtype != "auto" else (torch.bfloat16 if device.type == "cuda" else None)
    te_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    dit = load_dit(paths["dit"], dtype=dtype, device=device, progress=_tqdm_progress("loading DiT"),
                   **_accel(args))
    vae = load_vae(paths["vae"], dtype=torch.float32 if device.type == "cpu" else torch.bfloat16, device=device)
    te = load_text_encoder(paths["text_encoder"], tokenizer=args.tokenizer, dtype=te_dtype, device=device,
                           progress=_tqdm_progress("loading text encoder"))
    return dit, vae, te


def cmd_generate(args) -> int:
    from tqdm.auto import tqdm

    from .pipeline import GenerationConfig, WanPipeline
    from .video_io import write_video

    defaults = TINY_DEFAULTS if args.preset == "tiny-random" else FULL_DEFAULTS
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    cfg = GenerationConfig(
        prompt=args.prompt, negative_prompt=args.negative_prompt, width=args.width, height=args.height,
        frames=args.frames, steps=args.steps, guidance=args.guidance, shift=args.shift, solver=args.solver,
        seed=args.seed, convention=args.convention, batched_cfg=args.cfg_batched,
    )
    try:
        cfg.validate()
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.gemm == "scaled_mm" and not args.weights:
        raise UsageError("--gemm scaled_mm needs fp8 weights: add --weights fp8_scaled (or fp8_e4m3fn)")
    out = Path(args.out)
    if out.suffix.lower() not in (".mp4", ".mkv", ".mov", ".webm", ".webp", ".gif", ""):
        raise UsageError(f"--out {out}: unknown extension; use .mp4/.mkv/.webm, .webp/.gif, or a folder")
    device = _device(args.device)
    t0 = time.perf_counter()
    dit, vae, te = load_models(args, device)
    if args.preset == "tiny-random":
        print("wan_core: preset tiny-random uses RANDOM weights: the output is noise (it exercises the chain).",
              file=sys.stderr)
    pipe = WanPipeline(dit, vae, te)
    with torch.inference_mode():
        cond, uncond = pipe.encode_prompts(cfg.prompts, cfg.negative_prompt, need_negative=cfg.guidance != 1.0)
        with tqdm(total=cfg.steps, desc="sampling", unit="step") as bar:
            latents = pipe.sample_latents(cond, uncond, cfg, callback=lambda i, n, x, x0: bar.update(1))
        with tqdm(desc="decoding", unit="chunk") as bar:
            def decode_progress(done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)
            video = pipe.decode(latents, tiling=args.tiling, progress=decode_progress)
    written = write_video(video[0], out, fps=args.fps)
    print(f"wan_core: wrote {written} ({cfg.frames} frames, {cfg.width}x{cfg.height}, "
          f"{time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        return cmd_generate(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
