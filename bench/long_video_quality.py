"""Long videos on the built-in demo model (trained on 17 frames): prompt following in every 17-frame stretch of a
65-frame video, and seams, with and without context windows and their options (docs/long_video.md).

    python bench/long_video_quality.py [--prompts 8] [--frames 65] [--out long_video.json]
    python bench/long_video_quality.py --frames 33     # RIFLEx at twice the training length

For each setting and held-out single-object prompt: the video is cut into 17-frame stretches (frames 0-16, 16-32,
...) and each is scored by the demo's detector (``wan_core.demo.score``: colour found, direction right); a prompt
counts as followed over the whole video only when every stretch follows it. Seams: per frame the mean absolute
change from the previous frame; the ratio of the largest change to the median is reported (a hard seam between
windows shows as one frame change many times the usual one).
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from wan_core.demo import data as D
from wan_core.demo import load_demo_models
from wan_core.demo.evaluate import generation_config
from wan_core.demo.score import score_clip
from wan_core.pipeline import WanPipeline
from wan_core.sampling.context_windows import ContextWindows

STRETCH = 17


def settings(frames: int) -> dict[str, dict]:
    window = dict(frames=17, overlap=8)
    if frames <= 33:  # RIFLEx at up to 2x the training length, the whole video at once
        return {f"plain ({frames} frames)": {"frames": frames},
                f"riflex auto ({frames} frames)": {"frames": frames, "riflex": "auto"},
                f"riflex k=2 ({frames} frames)": {"frames": frames, "riflex": 2}}
    return {
        "plain (17 frames)": {"frames": 17},
        f"plain ({frames} frames)": {"frames": frames},
        "windows 17/8 static pyramid": {"frames": frames, "context": ContextWindows.from_frames(**window)},
        "windows, no anchor": {"frames": frames, "context": ContextWindows.from_frames(**window, anchor=False)},
        "windows + freenoise": {"frames": frames, "context": ContextWindows.from_frames(**window, freenoise=True)},
        "windows uniform": {"frames": frames, "context": ContextWindows.from_frames(**window, schedule="uniform")},
        f"riflex auto ({frames} frames at once)": {"frames": frames, "riflex": "auto"},
        "windows linear fuse": {"frames": frames, "context": ContextWindows.from_frames(**window, fuse="linear")},
    }


def stretches(video: torch.Tensor) -> list[torch.Tensor]:
    """``[3, T, H, W]`` -> 17-frame pieces starting every 16 frames (the last frame of one is the next's first)."""
    t = video.shape[1]
    return [video[:, s:s + STRETCH] for s in range(0, max(t - STRETCH, 0) + 1, STRETCH - 1)]


def seam_ratio(video: torch.Tensor) -> float:
    change = (video[:, 1:] - video[:, :-1]).abs().mean(dim=(0, 2, 3))  # [T-1]
    return float(change.max() / change.median().clamp_min(1e-6))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--frames", type=int, default=65)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    pairs = [(p, s) for p, s in D.held_out(1) if len(D.parse_caption(p)) == 1][: args.prompts]
    dit, vae, te = load_demo_models()
    pipe = WanPipeline(dit, vae, te)
    results = {}
    for name, overrides in settings(args.frames).items():
        whole, parts, seams, t0 = 0, [], [], time.perf_counter()
        with torch.inference_mode():
            for prompt, seed in pairs:
                cfg = generation_config(prompt, seed, **overrides)
                cond, uncond = pipe.encode_prompts([prompt], cfg.negative_prompt)
                video = pipe.decode(pipe.sample_latents(cond, uncond, cfg))[0].float()
                ok = [score_clip(piece, prompt).followed for piece in stretches(video)]
                whole += all(ok)
                parts.extend(ok)
                seams.append(seam_ratio(video))
        results[name] = {"followed_whole": whole / len(pairs), "followed_stretches": sum(parts) / len(parts),
                         "seam_ratio_median": float(torch.tensor(seams).median()), "seam_ratio_max": max(seams),
                         "seconds": round(time.perf_counter() - t0, 1)}
        print(f"{name:32s} whole {100 * results[name]['followed_whole']:5.1f} %  stretches "
              f"{100 * results[name]['followed_stretches']:5.1f} %  seam max/median {results[name]['seam_ratio_median']:.2f}"
              f" (worst {results[name]['seam_ratio_max']:.2f})  {results[name]['seconds']} s", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"prompts": pairs, "frames": args.frames, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
