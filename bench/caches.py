"""Diffusion caches side by side (issue 12): DiT evaluations, DiT work, wall time, PSNR against the uncached
video and the prompt-following score, for every preset on the same prompts and seeds in one run.

    python bench/caches.py                      # the built-in demo model when its weights are installed
    python bench/caches.py --prompts 8 --steps 50 --presets off exact wan
    python bench/caches.py --tiny               # tiny random models: evaluations and timing only

With the demo model (``wan_core.demo``) every clip is scored by its prompt-following detector
(``wan_core.demo.score``) and compared with the ``off`` clip of the same prompt and seed (PSNR of the decoded
video in [-1, 1]). Without it the tiny random models stand in: their output is noise, so only evaluations,
timing and the closeness to ``off`` mean anything. TeaCache and MagCache have published numbers for the real
Wan 2.1 1.3B / 14B only, so the bench first runs ``calibrate`` on the first prompt (reported separately) and
gives them its calibration. Presets run interleaved per prompt, so load changes on a shared machine hit all of
them alike. "work" is DiT FLOPs done / uncached at this model's size and token count; "work@1.3B" applies the
same counts to Wan 2.1 1.3B at 832x480x81 (32,760 tokens), where self-attention dominates a block.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wan_core.cache import PRESETS, CacheConfig, attention_share  # noqa: E402
from wan_core.pipeline import GenerationConfig, WanPipeline  # noqa: E402

TINY_PROMPTS = ("a red fox running through snow", "a blue car on a city street at night",
                "a green forest river at sunset", "a dog walking on the beach")
SHARE_13B_480P = attention_share(1536, 8960, 32760)


def load(args):
    """(dit, vae, text_encoder, prompts [(prompt, seed)], generation overrides, scorer or None, label)."""
    if not args.tiny:
        try:
            from wan_core.demo import load_demo_models
            from wan_core.demo import data as demo_data
            from wan_core.demo.evaluate import generation_config
            from wan_core.demo.score import score_clip

            if args.weights:  # a train-demo output folder (before its files are packaged)
                from wan_core import load_dit, load_text_encoder, load_vae

                folder = Path(args.weights)
                dit = load_dit(folder / "dit.safetensors")
                vae = load_vae(folder / "vae.safetensors", dtype=torch.float32)
                te = load_text_encoder(folder / "text_encoder.safetensors", dtype=torch.float32)
            else:
                dit, vae, te = load_demo_models()
            pairs = list(demo_data.HELD_OUT[: args.prompts])
            base = generation_config(pairs[0][0], pairs[0][1])
            settings = {k: getattr(base, k) for k in ("width", "height", "frames", "steps", "guidance", "shift",
                                                      "solver", "negative_prompt")}
            label = f"demo model from {args.weights}" if args.weights else "built-in demo model"
            return dit, vae, te, pairs, settings, score_clip, label
        except (ImportError, FileNotFoundError, AttributeError, OSError) as e:
            print(f"demo model not available ({type(e).__name__}: {e}); using tiny random models "
                  f"(evaluations and timing only)", file=sys.stderr)
    from wan_core.demo import tiny_random_models

    dit, vae, te = tiny_random_models(seed=0)
    pairs = [(p, 100 + i) for i, p in enumerate(TINY_PROMPTS)][: args.prompts]
    settings = {"width": 64, "height": 64, "frames": 17, "steps": 20, "guidance": 5.0, "shift": 5.0,
                "solver": "unipc", "negative_prompt": ""}
    return dit, vae, te, pairs, settings, None, "tiny random models (output is noise)"


def mse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.mean((a.float() - b.float()) ** 2))


def psnr(mses: list[float]) -> float:
    """PSNR in dB of videos in [-1, 1] (peak-to-peak 2) from their mean squared error over all clips."""
    m = sum(mses) / len(mses) if mses else 0.0
    return math.inf if m == 0 else 10 * math.log10(4.0 / m)


def forward_times(dit, cond, settings, repeats: int) -> tuple[float, float]:
    """Best-of-``repeats`` seconds of one DiT forward without and with the text-KV cache, alternated so load
    changes hit both alike (what ``exact`` saves per step and branch)."""
    from wan_core.cache import start_session
    from wan_core.sampling.hooks import BRANCH_COND

    cfg = GenerationConfig(prompt="x", **settings)
    x = torch.randn(cfg.latent_shape, generator=torch.Generator().manual_seed(0)).to(dit.device)
    t = torch.tensor([500.0], device=dit.device)
    best = {"off": math.inf, "exact": math.inf}
    session = start_session("exact", dit, 10**6, 1.0)
    with torch.inference_mode(), session.attached(dit):  # one run: the text K/V stay cached across forwards
        for i in range(repeats + 1):
            session.begin_step(i, 10**6, 0.5)
            for mode in ("off", "exact"):
                dit.cache = session if mode == "exact" else None
                t0 = time.perf_counter()
                with session.branch(BRANCH_COND):
                    dit(x, t, cond)
                if i:  # the first round warms up (and fills the cache)
                    best[mode] = min(best[mode], time.perf_counter() - t0)
        dit.cache = session
    return best["off"], best["exact"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=6, help="held-out prompts to generate (default 6)")
    p.add_argument("--steps", type=int, default=None, help="sampling steps (default: the model's, demo 20)")
    p.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS)
    p.add_argument("--tiny", action="store_true", help="tiny random models even if the demo model is installed")
    p.add_argument("--weights", default=None, help="demo model files from a train-demo --out folder")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--forward-repeats", type=int, default=20, help="DiT forwards timed for off vs exact")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dit, vae, te, pairs, settings, scorer, label = load(args)
    if args.steps:
        settings["steps"] = args.steps
    presets = ["off"] + [m for m in args.presets if m != "off"]
    pipe = WanPipeline(dit, vae, te)
    print(f"model: {label}; {len(pairs)} prompts; {settings['width']}x{settings['height']}x{settings['frames']}, "
          f"{settings['steps']} steps, guidance {settings['guidance']}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")

    configs = {m: CacheConfig.preset(m) for m in presets}
    if {"teacache", "magcache"} & set(presets):
        prompt, seed = pairs[0]
        cfg = GenerationConfig(prompt=prompt, seed=seed, **settings)
        with torch.inference_mode():
            cond, uncond = pipe.encode_prompts([prompt], cfg.negative_prompt)
            t0 = time.perf_counter()
            pipe.sample_latents(cond, uncond, cfg, cache="calibrate")
        cal = pipe.cache_report.calibration
        print(f"calibration: one uncached run on prompt 1 ({time.perf_counter() - t0:.1f} s); MagCache ratios "
              f"{cal.mag_cond[1]:.4f} .. {cal.mag_cond[-1]:.4f}")
        for m in ("teacache", "magcache"):
            if m in configs:
                configs[m] = configs[m].replace(calibration=cal)

    with torch.inference_mode():  # warm-up (first-call allocations and kernel selection), not timed
        prompt, seed = pairs[0]
        cfg = GenerationConfig(prompt=prompt, seed=seed, **{**settings, "steps": 2})
        cond, uncond = pipe.encode_prompts([prompt], cfg.negative_prompt, need_negative=cfg.guidance != 1.0)
        for m in presets:
            pipe.sample_latents(cond, uncond, cfg, cache=configs[m])
    rows = {m: {"computed": 0, "total": 0, "work": 0.0, "work13": 0.0, "wall": 0.0, "psnr": [], "followed": 0,
                "ratios": []} for m in presets}
    for prompt, seed in pairs:
        cfg = GenerationConfig(prompt=prompt, seed=seed, **settings)
        with torch.inference_mode():
            cond, uncond = pipe.encode_prompts([prompt], cfg.negative_prompt, need_negative=cfg.guidance != 1.0)
            reference = None
            for m in presets:
                t0 = time.perf_counter()
                latents = pipe.sample_latents(cond, uncond, cfg, cache=configs[m])
                wall = time.perf_counter() - t0
                video = pipe.decode(latents)[0]
                rep = pipe.cache_report
                r = rows[m]
                r["computed"] += rep.computed
                r["total"] += rep.total
                r["work"] += rep.work() * rep.total
                r["work13"] += rep.work(SHARE_13B_480P) * rep.total
                r["wall"] += wall
                r["ratios"].append(rows["off"]["last"] / wall if m != "off" else 1.0)
                if m == "off":
                    r["last"] = wall
                if reference is None:
                    reference = video
                else:
                    r["psnr"].append(mse(video, reference))
                if scorer is not None:
                    r["followed"] += scorer(video, prompt).followed

    off_evals = rows["off"]["computed"]
    head = f"{'preset':10s} {'DiT evals':>11s} {'x':>5s} {'work':>6s} {'work@1.3B':>9s} {'x@1.3B':>6s} " \
           f"{'wall s':>7s} {'s/step':>7s} {'x wall':>6s} {'PSNR dB':>8s}" + (" followed" if scorer else "")
    print("x wall: median over prompts of (off's sampling time / this preset's), same prompt and seed")
    print(head)
    print("-" * len(head))
    steps_total = settings["steps"] * len(pairs)
    for m in presets:
        r = rows[m]
        work, work13 = r["work"] / r["total"], r["work13"] / r["total"]
        mean_psnr = psnr(r["psnr"])
        line = (f"{m:10s} {r['computed']:5d}/{r['total']:<5d} {off_evals / r['computed']:5.2f} {100 * work:5.1f}% "
                f"{100 * work13:8.1f}% {1 / work13:6.2f} {r['wall']:7.2f} {r['wall'] / steps_total:7.3f} "
                f"{statistics.median(r['ratios']):6.2f} {mean_psnr:8.2f}")
        if scorer is not None:
            line += f" {100 * r['followed'] / len(pairs):7.1f}%"
        print(line)
    print("PSNR: decoded videos against the 'off' videos of the same prompts and seeds, from the mean squared "
          "error over all clips (inf = identical).")
    if "exact" in presets and args.forward_repeats:
        cond = pipe.encode_prompts([pairs[0][0]], need_negative=False)[0]
        t_off, t_exact = forward_times(dit, cond, settings, args.forward_repeats)
        print(f"one DiT forward (best of {args.forward_repeats}): off {1000 * t_off:.2f} ms, exact "
              f"{1000 * t_exact:.2f} ms ({t_off / t_exact:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
