"""Prompt travel on the built-in demo model: a 65-frame video with 17-frame context windows (overlap 8) and a
two-segment prompt "A | B" (two single-object prompts of different colours and directions), scored per 17-frame
stretch against the segment that guides it (docs/long_video.md, "Prompt travel").

    python bench/prompt_travel_quality.py [--pairs 8] [--steps 20] [--control] [--out travel.json]

The segments share latent frames 1-16 (real frames 1-64) evenly: segment A frames 1-32, B frames 33-64, so the
stretches 0-16 and 16-32 belong to A and 32-48, 48-64 to B. Each stretch is scored by the demo's detector
(``wan_core.demo.score``) against its own segment ("followed": colour found, direction right; "colour": the
segment's colour found and the other segment's not); ``--control`` also runs the same windows under prompt A
alone (no travel), where the B stretches should keep A's object. Seams as in bench/long_video_quality.py.
One line per pair as it finishes, then the totals.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from long_video_quality import seam_ratio, stretches  # noqa: E402

from wan_core.demo import data as D  # noqa: E402
from wan_core.demo import load_demo_models  # noqa: E402
from wan_core.demo.evaluate import generation_config  # noqa: E402
from wan_core.demo.score import score_clip  # noqa: E402
from wan_core.pipeline import WanPipeline  # noqa: E402
from wan_core.sampling.context_windows import ContextWindows  # noqa: E402

FRAMES = 65


def prompt_pairs(n: int) -> list[tuple[str, str, int]]:
    """(A, B, seed): held-out single-object prompts A (with their held-out seed), each paired with a held-out
    prompt of another colour and another direction."""
    singles = [(p, s) for p, s in D.held_out(1) if len(D.parse_caption(p)) == 1]
    out = []
    for i in range(len(singles)):
        a, seed = singles[i * 5 % len(singles)]  # a stride coprime with 32: every colour, shape and direction
        (ca, _, da), = D.parse_caption(a)
        for b, _ in singles[i * 5 + 13:] + singles[:i * 5 + 13]:
            (cb, _, db), = D.parse_caption(b)
            if cb != ca and db != da:
                out.append((a, b, seed))
                break
        if len(out) == n:
            break
    return out


def colour_only(video: torch.Tensor, mine: str, other: str) -> bool:
    """The stretch shows ``mine``'s colour and not ``other``'s."""
    return score_clip(video, mine).objects[0].found and not score_clip(video, other).objects[0].found


def run(pipe, prompt: str, seed: int, steps: int) -> torch.Tensor:
    cfg = generation_config(prompt, seed, frames=FRAMES, steps=steps, context=ContextWindows.from_frames(17, 8))
    cond, uncond, travel = pipe.encode_config(cfg)
    return pipe.decode(pipe.sample_latents(cond, uncond, cfg, travel=travel))[0].float()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=None, help="sampling steps (default: the demo's 20)")
    ap.add_argument("--control", action="store_true", help="also run prompt A alone over the same windows")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    pairs = prompt_pairs(args.pairs)
    pipe = WanPipeline(*load_demo_models())
    steps = args.steps or generation_config("", 0).steps
    results: dict[str, dict] = {}
    settings = (("travel A | B", True), ("A alone (no travel)", False))
    for name, travel in settings if args.control else settings[:1]:
        followed, colour, seams, per_stretch, t0 = [], [], [], [0, 0, 0, 0], time.perf_counter()
        for a, b, seed in pairs:
            with torch.inference_mode():
                video = run(pipe, f"{a} | {b}" if travel else a, seed, steps)
            mine_ok = []
            for k, piece in enumerate(stretches(video)):
                mine, other = (a, b) if k < 2 else (b, a)
                ok = score_clip(piece, mine).followed
                followed.append(ok)
                mine_ok.append(ok)
                per_stretch[k] += ok
                colour.append(colour_only(piece, mine, other))
            seams.append(seam_ratio(video))
            print(f"  {name}: {a!r} | {b!r} (seed {seed}): stretches followed {mine_ok}, colour only "
                  f"{colour[-4:]}, seam {seams[-1]:.2f}", flush=True)
        results[name] = {"followed": sum(followed) / len(followed), "colour": sum(colour) / len(colour),
                         "followed_per_stretch": per_stretch, "seam_ratio_median": float(torch.tensor(seams).median()),
                         "seam_ratio_max": max(seams), "seconds": round(time.perf_counter() - t0, 1)}
        r = results[name]
        print(f"{name:22s} stretches following their segment {100 * r['followed']:5.1f} % (per stretch "
              f"{per_stretch} of {len(pairs)}), its colour only {100 * r['colour']:5.1f} %, seam max/median "
              f"{r['seam_ratio_median']:.2f} (worst {r['seam_ratio_max']:.2f}), {r['seconds']} s", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"pairs": pairs, "frames": FRAMES, "steps": steps, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
