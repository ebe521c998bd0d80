"""Benchmark: where the demo VAE's reconstruction stands against simple codes, in one run, on the held-out clips
``wan_core.demo.evaluate.vae_psnr`` scores (64x64, 17 frames, seeds outside the training range).

Rows: the clip's mean colour; bilinear upsampling of 8x8 and of 4x4 per-frame block means (the first keeps 3
numbers per 8x8 block and frame, ~5x fewer than the VAE's latent; the second ~1.3x more); the linear block-PCA code
of the VAE's exact latent shape (``wan_core.demo.block_pca``: 16 numbers per 8x8 block for frame 0 and for each
later group of 4 frames), fitted on training clips; then each VAE given (default: the built-in one), untiled
and tiled (``vae_psnr``).

    python bench/demo_vae_baselines.py
    python bench/demo_vae_baselines.py --vae runs/r9/vae.safetensors --pca-clips 300
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wan_core.demo import data as D  # noqa: E402
from wan_core.demo.block_pca import fit_demo_block_pca  # noqa: E402
from wan_core.demo.evaluate import vae_psnr  # noqa: E402


def _db(a: torch.Tensor, b: torch.Tensor) -> float:
    return 10 * math.log10(4.0 / max(float(torch.mean((a - b) ** 2)), 1e-12))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vae", action="append", default=None, help="VAE file(s) to add (default: the built-in one)")
    ap.add_argument("--clips", type=int, default=6, help="held-out clips (vae_psnr's)")
    ap.add_argument("--pca-clips", type=int, default=300, help="training clips the block-PCA code is fitted on")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    videos = torch.stack([D.make_clip(D.TRAIN_SEED_LIMIT + 500 + i, width=64, height=64, frames=17)[0]
                          for i in range(args.clips)])  # [N, 3, 17, 64, 64]: vae_psnr's clips
    frames = videos.transpose(1, 2).flatten(0, 1)  # [N*17, 3, 64, 64]
    rows = [("clip mean colour", _db(videos.mean(dim=(2, 3, 4), keepdim=True).expand_as(videos), videos))]
    for k in (8, 4):
        up = F.interpolate(F.avg_pool2d(frames, k), scale_factor=k, mode="bilinear", align_corners=False)
        rows.append((f"bilinear from {k}x{k} block means per frame", _db(up, frames)))
    pca = fit_demo_block_pca(16, args.pca_clips)
    rows.append((f"linear block-PCA code, the VAE's latent shape ({args.pca_clips} training clips)",
                 _db(pca.decode(pca.code(videos)), videos)))
    from wan_core.vae.loader import load_vae

    if args.vae:
        vaes = [(p, load_vae(p, dtype=torch.float32)) for p in args.vae]
    else:
        from wan_core.demo import builtin_paths

        vaes = [("built-in demo VAE", load_vae(str(builtin_paths()["vae"]), dtype=torch.float32))]
    for name, vae in vaes:
        r = vae_psnr(vae, n=args.clips)
        rows.append((f"{name}, untiled", r["untiled_db"]))
        rows.append((f"{name}, tiled ({r['tile_latents']} latents, {r['overlap_latents']} blended)", r["tiled_db"]))
    print(f"| code ({args.clips} held-out clips, 64x64x17) | PSNR dB |\n|---|---|")
    for name, db in rows:
        print(f"| {name} | {db:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
