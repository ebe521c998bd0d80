"""Evidence that the demo VACE branch does what it is asked (docs/demo_model.md, "The VACE branch"):
``python -m wan_core.demo.vace_eval [--pairs N]``.

* control: the prompt names one direction, the control video (``vace_tasks.silhouette_video``) moves the object
  another way; counted: the object (the prompt's colour) moves the control's way (``score.score_clip`` on the
  control's caption), and its centroid's mean distance to the track. Baseline: the same prompt, seed and
  context at VACE scale 0 (the plain demo DiT).
* reference: the prompt names colour A, the reference image is a patch of colour B; counted: an object of
  colour B is found, and it moves the prompt's way; at scale 1 and 2 (the shipped branch takes its reference at
  scale 2, docs/demo_model.md). Baseline: scale 0.

Held-out generation seeds (above ``data.TRAIN_SEED_LIMIT``), the demo's sampling defaults.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

import torch

from .. import latent_format
from . import data as D
from .evaluate import generation_config
from .score import colour_masks, score_clip, track
from .vace_tasks import colour_patch, silhouette_video, track_centres

__all__ = ["control_cases", "generate", "reference_cases", "run_control", "run_reference", "track_distance"]

CONTROL_SEED = D.TRAIN_SEED_LIMIT + 20_000
REFERENCE_SEED = D.TRAIN_SEED_LIMIT + 30_000


def generate(dit, vae, te, prompt: str, seed: int, vace: torch.Tensor, scale: float = 1.0, ref_frames: int = 0,
             **overrides) -> torch.Tensor:
    """One video ``[3, T, H, W]`` in [-1, 1] from the VACE DiT: the demo's sampler settings (``overrides``: fields
    of ``GenerationConfig``), VACE context ``vace`` ``[1, 96, ref_frames + F, h, w]`` at ``scale``, the first
    ``ref_frames`` latent frames dropped before decoding."""
    from ..sampling import ClassifierFreeGuidance, build_schedule, initial_latent, make_noise, sample

    cfg = generation_config(prompt, seed, **overrides)
    cond, uncond = te.encode([prompt, cfg.negative_prompt])
    schedule = build_schedule(cfg.schedule_config())
    noise = make_noise(seed, (1, latent_format.CHANNELS, *vace.shape[2:]))

    def model_fn(x, t, ctx):
        return dit(x, t, ctx, vace_context=vace, vace_scale=scale)

    with torch.inference_mode():
        guide = ClassifierFreeGuidance(model_fn, [cond], [uncond], cfg.guidance)
        x = sample(guide, initial_latent(noise, schedule), schedule, cfg.solver)
        return vae.decode(latent_format.from_model(x[:, :, ref_frames:]))[0]


def track_distance(video: torch.Tensor, colour: str, centres: torch.Tensor) -> float:
    """Mean distance (pixels) between the centroid of ``colour``'s pixels and ``centres`` ``[T, 2]`` over the
    frames where the colour covers the detector's minimum area; NaN when it never does."""
    from .score import MIN_AREA_FRACTION

    mask = colour_masks(video)[colour].float()  # [T, H, W]
    t, h, w = mask.shape
    area = mask.flatten(1).sum(1)
    ok = area >= MIN_AREA_FRACTION * h * w
    if not bool(ok.any()):
        return math.nan
    ys, xs = torch.arange(h).view(1, h, 1), torch.arange(w).view(1, 1, w)
    cx = (mask * xs).flatten(1).sum(1) / area.clamp_min(1)
    cy = (mask * ys).flatten(1).sum(1) / area.clamp_min(1)
    d = torch.sqrt((cx - centres[:, 0]) ** 2 + (cy - centres[:, 1]) ** 2)
    return float(d[ok].mean())


def control_cases(n: int) -> list[tuple[str, D.ClipSpec]]:
    """``n`` (prompt, control clip) pairs whose directions differ, over every colour, shape and direction."""
    colours, dirs = list(D.COLOURS), list(D.DIRECTIONS)
    out = []
    for k in range(n):
        colour, shape, said = colours[(k // 2) % 4], D.SHAPES[k % 2], dirs[k % 4]
        other = [d for d in dirs if d != said][(k // 4) % 3]
        spec = D.clip_spec(CONTROL_SEED + 7 * k, width=64, height=64, frames=17,
                           caption=f"a {colour} {shape} moving {other}")
        out.append((f"a {colour} {shape} moving {said}", spec))
    return out


def reference_cases(n: int) -> list[tuple[str, str, int]]:
    """``n`` (prompt naming colour A, reference colour B != A, seed) triples."""
    colours, dirs = list(D.COLOURS), list(D.DIRECTIONS)
    out = []
    for k in range(n):
        a = colours[k % 4]
        b = [c for c in colours if c != a][(k // 4) % 3]
        out.append((f"a {a} {D.SHAPES[(k // 2) % 2]} moving {dirs[(k // 3) % 4]}", b, REFERENCE_SEED + 7 * k))
    return out


def _mean(values) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return round(sum(vals) / len(vals), 2) if vals else math.nan


def run_control(dit, vae, te, n: int = 24, scales=(1.0, 0.0), **overrides) -> dict:
    """Per VACE scale: the share of ``control_cases(n)`` whose object follows the control track, follows the
    prompt instead, and the centroid's mean distance to the track (pixels, over the clips where it is found)."""
    from ..vace import vace_context

    result = {}
    cases = control_cases(n)
    contexts = [vace_context(vae, silhouette_video(spec)[None]).context for _, spec in cases]
    for scale in scales:
        track_ok, prompt_ok, dist = 0, 0, []
        for (prompt, spec), ctx in zip(cases, contexts):
            video = generate(dit, vae, te, prompt, spec.seed, ctx, scale, **overrides)
            track_ok += score_clip(video, spec.caption).followed
            prompt_ok += score_clip(video, prompt).followed
            dist.append(track_distance(video, spec.objects[0].colour, track_centres(spec)))
        result[f"scale_{scale:g}"] = {"pairs": n, "follows_control": track_ok / n, "follows_prompt": prompt_ok / n,
                                      "track_distance_px": _mean(dist),
                                      "found": sum(not math.isnan(d) for d in dist)}
    return result


def run_reference(dit, vae, te, n: int = 24, scales=(1.0, 2.0, 0.0), **overrides) -> dict:
    """Per VACE scale: the share of ``reference_cases(n)`` where an object of the reference colour B is found, where
    it also moves the prompt's way, and where the prompt's colour A is found."""
    from ..vace import vace_context

    result = {}
    cases = reference_cases(n)
    size = (generation_config("", 0).frames, 64, 64)
    contexts = {b: vace_context(vae, None, None, [[colour_patch(b, 64, 64)]], size=size) for _, b, _ in cases}
    for scale in scales:
        b_found, b_moves, a_found = 0, 0, 0
        for prompt, b, seed in cases:
            ctx = contexts[b]
            video = generate(dit, vae, te, prompt, seed, ctx.context, scale, ctx.ref_frames, **overrides)
            masks = colour_masks(video)
            a = prompt.split()[1]
            b_found += track(masks[b])[0]
            a_found += track(masks[a])[0]
            b_moves += score_clip(video, prompt.replace(f" {a} ", f" {b} ")).followed
        result[f"scale_{scale:g}"] = {"pairs": n, "reference_colour_found": b_found / n,
                                      "reference_colour_moves_as_prompted": b_moves / n,
                                      "prompt_colour_found": a_found / n}
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m wan_core.demo.vace_eval")
    ap.add_argument("--pairs", type=int, default=24, help="prompt/seed pairs per experiment")
    ap.add_argument("--steps", type=int, default=None, help="sampling steps (default: the demo's)")
    ap.add_argument("--vace", default=None, help="a VACE branch file (default: the built-in one)")
    args = ap.parse_args(argv)
    if args.pairs < 1:
        print("vace_eval: --pairs must be >= 1", file=sys.stderr)
        return 2
    from . import builtin_paths, load_demo_models
    from .vace_branch import load_vace_branch

    paths = builtin_paths()
    _, vae, te = load_demo_models()
    dit = load_vace_branch(paths["dit"], args.vace or paths["vace"], dtype=torch.float32)
    overrides = {"steps": args.steps} if args.steps else {}
    out = {"control": run_control(dit, vae, te, args.pairs, **overrides),
           "reference": run_reference(dit, vae, te, args.pairs, **overrides)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
