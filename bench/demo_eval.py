"""Benchmark: prompt-following score of the built-in demo model under every acceleration (not a test).

One run, one table: each row generates the held-out prompts (``wan_core.demo.data.HELD_OUT``: 32 single-object
prompts with unseen seeds, 8 unseen two-object captions) at the demo defaults with one setting changed, and
reports the fraction followed (colour and direction, ``wan_core.demo.score``), the single-object share, the
DiT evaluations, the wall time, and the difference to the baseline.

    python bench/demo_eval.py [--prompts 40] [--seeds 3] [--rows baseline,steps10,...] [--threads 2] [--json out.json]
                              [--dir DIR]   # a train-demo output folder instead of the built-in files

Every row uses the same prompt/seed pairs, so differences between rows are paired; one seed per prompt (40
pairs) still moves the baseline by about 7 points from one set of seeds to another: ``--seeds 3`` (120 pairs)
for a score to compare with another model.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import torch

from wan_core.demo import builtin_paths, demo_dit_options
from wan_core.demo.data import HELD_OUT, held_out
from wan_core.demo.evaluate import run_prompts, vae_psnr
from wan_core.demo.model import DEMO_DEFAULTS, DEMO_DIT


def _cache_rows() -> list[tuple[str, dict, dict]]:
    try:
        from wan_core.cache import PRESETS
    except ImportError:
        return [("cache (not landed)", {}, {"skip": "wan_core.cache is not available yet"})]
    return [(f"cache {p}", {}, {"cache": p}) for p in PRESETS if p not in ("off", "exact")]


# name -> (load_dit keywords, generation overrides / run options)
ROWS: list[tuple[str, dict, dict]] = [
    ("baseline", {}, {}),
    (f"steps {DEMO_DEFAULTS.steps // 2}", {}, {"steps": DEMO_DEFAULTS.steps // 2}),
    ("steps 8", {}, {"steps": 8}),
    ("cache off", {}, {"cache": "off"}),
    *_cache_rows(),
    ("attention int8", {"attention": "int8"}, {}),
    ("skiparse osp13", {"skiparse": "osp13"}, {}),
    # SUV's default profile has 7 U-shaped stages; the 6-block demo DiT gets dense x2 / 1:2 sparse x2 / dense x2
    # (the 4-block one had dense / sparse x2 / dense: half its blocks sparse, -25.8 points)
    ("skiparse suv (1,2,1)", {"skiparse": "suv", "suv_profile": (1, 2, 1),
                              "suv_stage_blocks": (2, DEMO_DIT.num_layers - 4, 2)}, {}),
    ("fp8 weights, upcast", {"weights": "fp8_scaled", "gemm": "upcast"}, {}),
    ("fp8 weights, scaled_mm", {"weights": "fp8_scaled", "gemm": "scaled_mm"}, {}),
    ("bf16 DiT", {"dtype": torch.bfloat16}, {}),
]


def main() -> int:
    from wan_core.dit.loader import load_dit
    from wan_core.text.encoder import load_text_encoder
    from wan_core.vae.loader import load_vae

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=len(HELD_OUT), help="first N held-out prompts")
    ap.add_argument("--seeds", type=int, default=1, help="generation seeds per prompt (data.held_out)")
    ap.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    ap.add_argument("--dir", default=None, help="score the model in this train-demo output folder (default: built-in)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pairs = tuple(pair for k, pair in enumerate(held_out(args.seeds)) if k % len(HELD_OUT) < args.prompts)
    paths = builtin_paths()
    if args.dir:
        paths = {name: os.path.join(args.dir, os.path.basename(path)) for name, path in paths.items()}
        missing = [p for p in paths.values() if not os.path.exists(p)]
        if missing:
            ap.error(f"--dir {args.dir}: missing {', '.join(missing)} (has train-demo finished there?)")
    vae = load_vae(paths["vae"], dtype=torch.float32)
    te = load_text_encoder(paths["text_encoder"], dtype=torch.float32)
    psnr = vae_psnr(vae)
    print(f"VAE reconstruction (held-out 64x64x17): untiled {psnr['untiled_db']} dB, tiled "
          f"({psnr['tile_latents']}-latent tiles) {psnr['tiled_db']} dB", flush=True)
    # row names hold commas themselves ("fp8 weights, upcast", "skiparse suv (1,2,1)"): split only on a comma
    # that is neither inside parentheses nor followed by a space
    wanted = {r.strip() for r in re.split(r",(?![^(]*\))(?! )", args.rows) if r.strip()}
    results = []
    base = None
    print(f"{len(pairs)} held-out prompts, demo defaults {DEMO_DEFAULTS}", flush=True)
    header = f"{'setting':28s} {'followed':>8s} {'single':>7s} {'shape':>6s} {'vs base':>8s} {'DiT evals':>9s} {'wall s':>7s}"
    print(header)
    print("-" * len(header))
    for name, load_kw, run_kw in ROWS:
        if wanted and name not in wanted:
            continue
        if "skip" in run_kw:
            print(f"{name:28s} {'-':>8s}  ({run_kw['skip']})", flush=True)
            results.append({"row": name, "skipped": run_kw["skip"]})
            continue
        run_kw = dict(run_kw)
        cache = run_kw.pop("cache", None)
        try:
            dit = load_dit(paths["dit"], **demo_dit_options(load_kw))  # fp32 unless the row chooses (fp8: bf16)
            t0 = time.perf_counter()
            r = run_prompts(dit, vae, te, pairs, cache=cache, **run_kw)
        except Exception as e:  # noqa: BLE001 - an unsupported setting on this machine is a row, not a crash
            line = f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"
            print(f"{name:28s} {'n/a':>8s}  ({line})", flush=True)
            results.append({"row": name, "error": line})
            continue
        wall = time.perf_counter() - t0
        followed = 100 * r.score.followed
        single = 100 * r.score.subset(1).followed
        shape = 100 * r.score.followed_with_shape
        if base is None and name == "baseline":
            base = followed
        delta = "" if base is None else f"{followed - base:+.1f}"
        print(f"{name:28s} {followed:7.1f}% {single:6.1f}% {shape:5.1f}% {delta:>8s} {r.dit_evaluations:9d} "
              f"{wall:7.1f}", flush=True)
        results.append({"row": name, "followed_pct": round(followed, 1), "single_pct": round(single, 1),
                        "with_shape_pct": round(shape, 1), "dit_evaluations": r.dit_evaluations,
                        "wall_s": round(wall, 1)})
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"vae_psnr": psnr, "prompts": len(pairs), "rows": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
