"""Clip extension on the built-in demo model (trained on 17-frame clips): does a continued clip keep the object's
colour and motion, and does the join show? (docs/long_video.md section 3)

    python bench/extension_quality.py [--prompts 6] [--out extension.json]

Every setting makes a 41-frame video of one held-out single-object prompt: a 17-frame first clip and two
17-frame clips that continue it over a 5-frame overlap (12 new frames each), or, for contrast, the same length
at once or as unrelated clips. Scored per video:
- *stretches followed*: the demo's detector (``wan_core.demo.score``: colour found, direction right) on the
  17-frame stretches 0-16, 12-28 and 24-40 (each new clip with the end of the one before);
- *object jump*: at each join, the distance the prompt's object's centroid moves between the last frame before
  and the first frame after, over its median frame-to-frame move (1 = as smooth as inside a clip);
- *motion kept*: the share of joins where the object's move over the 4 frames after the join points the same way
  as over the 4 frames before (positive cosine);
- *colour step*: at each join, the change of the object's mean colour (RGB distance, 0-1 scale; the largest);
- *drift*: the object's mean colour in the last 5 frames against the first 5 (RGB distance, 0-1 scale).
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from wan_core.demo import data as D
from wan_core.demo import load_demo_models
from wan_core.demo.evaluate import generation_config
from wan_core.demo.score import colour_masks, score_clip
from wan_core.extension import Extension, from_pixels, join_pixels, run_chain
from wan_core.pipeline import WanPipeline

CLIP, OVERLAP, CLIPS = 17, 5, 3
JOINS = [CLIP - 1 + i * (CLIP - OVERLAP) for i in range(CLIPS - 1)]  # last frame before each join: 16, 28
STRETCHES = [(0, 17), (12, 29), (24, 41)]


def chain_latent(pipe, cfg, embeds):
    return run_chain(pipe, cfg, CLIPS, Extension(overlap=OVERLAP), lambda i: embeds, latent_space=True).video


def chain_pixels(colour: str, conditioning: str = "auto"):
    """Each clip continues the decoded video so far (a VAE round trip at every join), colour-matched or not."""
    def make(pipe, cfg, embeds):
        ext = Extension(overlap=OVERLAP, colour=colour, conditioning=conditioning)  # type: ignore[arg-type]
        video = pipe.decode(pipe.sample_latents(*embeds, cfg))
        for i in range(1, CLIPS):
            cont = from_pixels(pipe.vae, pipe.dit, video, CLIP, ext)
            clip = pipe.decode(pipe.sample_latents(*embeds, cfg.replace(seed=cfg.seed + i), **cont.sample_inputs()))
            video = join_pixels(video, clip, cont)
        return video
    return make


def unrelated(pipe, cfg, embeds):
    """Three clips drawn on their own, cut to the same length (no conditioning: what a join looks like)."""
    clips = [pipe.decode(pipe.sample_latents(*embeds, cfg.replace(seed=cfg.seed + i))) for i in range(CLIPS)]
    return torch.cat([clips[0]] + [c[:, :, OVERLAP:] for c in clips[1:]], dim=2)


def at_once(pipe, cfg, embeds):
    return pipe.decode(pipe.sample_latents(*embeds, cfg.replace(frames=41)))


SETTINGS = {
    "chain in latent space (auto: clean head)": chain_latent,
    "pixels, clean head, colour match off": chain_pixels("off"),
    "pixels, clean head, mean-std": chain_pixels("mean-std"),
    "pixels, clean head, histogram": chain_pixels("histogram"),
    "pixels, re-noised head, colour off": chain_pixels("off", "replace"),
    "pixels, re-noised head, mean-std": chain_pixels("mean-std", "replace"),
    "unrelated clips (no extension)": unrelated,
    "41 frames at once (no extension)": at_once,
}


def object_track(video: torch.Tensor, colour: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per frame: the centroid ``[T, 2]``, the mean colour ``[T, 3]`` (0-1) of the prompt's colour, and whether
    it is seen ``[T]``."""
    mask = colour_masks(video)[colour].float()  # [T, H, W]
    rgb = ((video.float().cpu() + 1) / 2).clamp(0, 1).permute(1, 2, 3, 0)  # [T, H, W, 3]
    area = mask.flatten(1).sum(1)
    ys, xs = torch.meshgrid(torch.arange(mask.shape[1]), torch.arange(mask.shape[2]), indexing="ij")
    cx = (mask * xs).flatten(1).sum(1) / area.clamp_min(1)
    cy = (mask * ys).flatten(1).sum(1) / area.clamp_min(1)
    mean = (rgb * mask[..., None]).flatten(1, 2).sum(1) / area.clamp_min(1)[:, None]
    return torch.stack([cx, cy], 1), mean, area >= 4


def join_scores(video: torch.Tensor, colour: str) -> dict[str, float]:
    pos, col, seen = object_track(video, colour)
    step = (pos[1:] - pos[:-1]).norm(dim=1)
    shift = (col[1:] - col[:-1]).norm(dim=1)
    both = seen[1:] & seen[:-1]
    inside = [t for t in range(len(step)) if both[t] and t not in JOINS]
    nan = float("nan")
    if not inside or not all(both[j] for j in JOINS):
        return {"object_jump": nan, "motion_kept": nan, "colour_step": nan, "drift": nan}
    kept = []
    for j in JOINS:  # frames j-4..j before the join, j+1..j+5 after
        before, after = pos[j] - pos[max(j - 4, 0)], pos[min(j + 5, len(pos) - 1)] - pos[j + 1]
        if seen[max(j - 4, 0)] and seen[min(j + 5, len(pos) - 1)]:
            kept.append(float(torch.dot(before, after)) > 0)
    first = col[:5][seen[:5]].mean(0) if seen[:5].any() else col[seen].mean(0)
    last = col[-5:][seen[-5:]].mean(0) if seen[-5:].any() else col[seen].mean(0)
    return {"object_jump": max(float(step[j]) for j in JOINS) / float(step[inside].median().clamp_min(0.25)),
            "motion_kept": sum(kept) / len(kept) if kept else nan,
            "colour_step": max(float(shift[j]) for j in JOINS),
            "drift": float((last - first).norm())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", nargs="*", default=None, help="names of settings to run (substrings)")
    args = ap.parse_args()
    pairs = [(p, s) for p, s in D.held_out(1) if len(D.parse_caption(p)) == 1][: args.prompts]
    pipe = WanPipeline(*load_demo_models())
    results = {}
    chosen = {n: m for n, m in SETTINGS.items() if not args.only or any(o in n for o in args.only)}
    for name, make in chosen.items():
        t0, follows, rows = time.perf_counter(), [], []
        with torch.inference_mode():
            for prompt, seed in pairs:
                cfg = generation_config(prompt, seed, frames=CLIP)
                embeds = pipe.encode_prompts([prompt], cfg.negative_prompt)
                video = make(pipe, cfg, embeds)[0].float()
                assert video.shape[1] == 41, video.shape
                follows.extend(score_clip(video[:, a:b], prompt).followed for a, b in STRETCHES)
                rows.append(join_scores(video, D.parse_caption(prompt)[0][0]))
        agg = {k: float(torch.tensor([r[k] for r in rows]).nanmedian()) for k in rows[0]}
        agg["motion_kept"] = float(torch.tensor([r["motion_kept"] for r in rows]).nanmean())
        results[name] = {"followed_stretches": sum(follows) / len(follows), **agg,
                         "measured": sum(r["drift"] == r["drift"] for r in rows),
                         "seconds": round(time.perf_counter() - t0, 1)}
        r = results[name]
        print(f"{name:40s} stretches {100 * r['followed_stretches']:5.1f} %  object jump {r['object_jump']:5.2f}  "
              f"motion kept {100 * r['motion_kept']:5.1f} %  colour step {r['colour_step']:.3f}  drift "
              f"{r['drift']:.3f}  ({r['measured']} measured, {r['seconds']} s)", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"prompts": pairs, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
