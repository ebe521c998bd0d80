"""The ``train-demo`` command's flags, in one place and without torch: ``python -m wan_core`` builds them at
parse time (``--help`` answers at once) and ``wan_core.demo.train`` uses the same function."""
from __future__ import annotations

import argparse

VAE_RECIPES = ("reconstruction", "block-pca")  # wan_core.demo.train.VAE_RECIPES (tested equal)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output folder (run the same command again to resume)")
    for flag in ("--vae-steps", "--dit-steps", "--decoder-steps", "--clips", "--threads"):
        p.add_argument(flag, type=int, default=None, help="default: the shipped run's value")
    p.add_argument("--vae-recipe", choices=VAE_RECIPES, default=None,
                   help="the VAE stage's phases (default: block-pca, the shipped files' recipe: it distils a "
                        "linear code of the VAE's shape; reconstruction: the recipe until run 12, see "
                        "docs/demo_model.md)")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default=None,
                   help="the DiT stage's precision (default auto: bf16 autocast where the CPU has bf16 instructions)")
    p.add_argument("--no-compile", action="store_true",
                   help="run the DiT stage's blocks eager (default: torch.compile where a C++ compiler is found)")
