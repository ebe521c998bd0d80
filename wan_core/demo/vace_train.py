"""Training the demo model's VACE branch (docs/demo_model.md, "The VACE branch"):
``python -m wan_core.demo.vace_train --out DIR``.

The main DiT is the shipped demo DiT, frozen; only the VACE blocks and ``vace_patch_embedding`` learn, with the
demo DiT's flow-matching loss and timestep shift (``wan_core.train.train``). Each training item is one
single-object clip (64x64, 17 frames) under one task (``vace_tasks``):

* control: the VACE context of the clip's silhouette video; the prompt names another direction with probability
  ``prompt_swap``, so the branch learns that the track wins over the prompt;
* reference: a colour patch of the object's colour as reference image (one latent frame in front, whose target is
  the reference's own latent, as VACE trains its reference frames); the prompt names another colour with
  probability ``prompt_swap``;
* plain: the empty VACE context (grey video, mask ones), the prompt as is.

Two stages, each skipped when its output exists (rerun the command to resume): ``vace_data.pt`` (latents and
contexts, encoded once) and the branch training (checkpoints in ``vace_ckpt/``; ``vace.safetensors`` at the end:
the VACE tensors only, fp16).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import dataclass

import torch

from .. import latent_format
from . import data as D
from .vace_branch import VACE_FILE_DTYPE, vace_dit_from, vace_state
from .vace_tasks import TASKS, colour_patch, silhouette_video

__all__ = ["VaceBatch", "VaceTrainConfig", "VaceTrainDataset", "VaceTrainModel", "collate_vace", "control_contexts",
           "encode_data", "main", "train_branch"]


@dataclass(frozen=True)
class VaceTrainConfig:
    clips: int = 480
    width: int = 64
    height: int = 64
    frames: int = 17
    task_weights: tuple[float, float, float] = (0.45, 0.40, 0.15)  # control, reference, plain (``TASKS`` order)
    items_per_clip: int = 3  # dataset items per clip (each with its own task); the data stream reshuffles them
    prompt_swap: float = 0.5
    caption_dropout: float = 0.1  # unconditional text (empty or the default negative prompt): CFG's baseline
    steps: int = 900
    batch: int = 8
    lr: float = 5e-4
    warmup: int = 50
    timestep_shift: float = 3.0  # the demo DiT's training shift (DemoTrainConfig.dit_timestep_shift)
    max_minutes: float = 17.0  # wall-clock budget of one run of the training stage (it checkpoints and stops)
    start: str | None = None  # a branch file (``vace.safetensors``) to go on from instead of the fresh branch
    threads: int = 1  # on a 2-core machine shared with other work, 2 threads ran a step 10x slower
    seed: int = 0


# ----------------------------------------------------------------------------------------- data
def _contexts(vae, videos: torch.Tensor | None, refs, size, batch: int) -> torch.Tensor:
    from ..vace import vace_context

    return vace_context(vae, videos, None, refs, size=size, batch=batch).context


def control_contexts(vae, plain: torch.Tensor, silhouettes: torch.Tensor) -> torch.Tensor:
    """The VACE contexts ``[B, 96, F, h, w]`` of ``silhouettes`` ``[B, 3, T, H, W]`` with masks all ones, what
    ``wan_core.vace.vace_context`` gives (tested), from the empty context ``plain`` ``[96, F, h, w]``: with m = 1 the
    inactive part is a zero video (``plain``'s channels 0-15) and the mask channels are ``plain``'s; only the
    reactive latents (16-31) are encoded, by the VAE's one-pass encoder (12x faster than the streamed
    ``encode`` on 16 clips)."""
    n = latent_format.CHANNELS
    reactive = latent_format.to_model(vae.model.encode_full(silhouettes.to(vae.device, vae.dtype)).float())
    out = plain.unsqueeze(0).repeat(silhouettes.shape[0], 1, 1, 1, 1)
    out[:, n:2 * n] = reactive.to(out.device)
    return out


def encode_data(vae, te, cfg: VaceTrainConfig, progress=None) -> dict:
    """Latents, control contexts and the constant contexts of ``cfg.clips`` single-object training clips:
    ``{"seeds", "captions", "latents": [16, F, h, w] each, "control": [96, F, h, w] each, "plain": [96, F, h, w],
    "reference": {colour: [96, 1 + F, h, w]}, "ref_latent": {colour: [16, 1, h, w]}, "embeddings": {caption:
    [L, D]}, "uncond": [[L, D], ...]}``."""
    from ..sampling import DEFAULT_NEGATIVE_PROMPT

    seeds = D.training_seeds(cfg.clips, two_object_share=0.0)
    specs = [D.clip_spec(s, width=cfg.width, height=cfg.height, frames=cfg.frames, two_object_share=0.0)
             for s in seeds]
    size = (cfg.frames, cfg.height, cfg.width)
    latents, control = [], []
    with torch.no_grad():
        plain = _contexts(vae, None, None, size, 1)[0]
        reference = {c: _contexts(vae, None, [[colour_patch(c, cfg.height, cfg.width)]], size, 1)[0]
                     for c in D.COLOURS}
        for i in range(0, len(specs), 16):
            chunk = specs[i:i + 16]
            video = torch.stack([D.render(s) for s in chunk])
            latents += list(latent_format.to_model(vae.model.encode_full(video).float()))
            control += list(control_contexts(vae, plain, torch.stack([silhouette_video(s) for s in chunk])))
            if progress is not None:
                progress(i + len(chunk), len(specs))
    ref_latent = {c: ctx[:latent_format.CHANNELS, :1] for c, ctx in reference.items()}
    captions = sorted({f"a {c} {s} moving {d}" for c in D.COLOURS for s in D.SHAPES for d in D.DIRECTIONS})
    uncond = te.encode(["", DEFAULT_NEGATIVE_PROMPT])
    return {"seeds": seeds, "captions": [s.caption for s in specs], "latents": latents, "control": control,
            "plain": plain, "reference": reference, "ref_latent": ref_latent,
            "embeddings": dict(zip(captions, te.encode(captions))), "uncond": uncond}


@dataclass
class VaceBatch:
    """The conditioning of a training batch: text contexts (one ``[L_i, D]`` each) and VACE contexts
    ``[B, 96, F, h, w]``; ``.to`` is what the training loop calls on a context."""

    text: list[torch.Tensor]
    vace: torch.Tensor

    def to(self, device) -> "VaceBatch":
        return VaceBatch([t.to(device) for t in self.text], self.vace.to(device))


def _swap(caption: str, rng: random.Random, part: int, values) -> str:
    words = caption.split()
    words[part] = rng.choice([v for v in values if v != words[part]])
    return " ".join(words)


class VaceTrainDataset(torch.utils.data.Dataset):
    """Item i: clip ``i % clips`` under the task drawn for i (seeded); ``{"latent", "context": (text, vace)}``.
    Prompt swaps and caption dropout are drawn per call, as ``LatentDataset`` does."""

    def __init__(self, blob: dict, cfg: VaceTrainConfig):
        self.blob, self.cfg = blob, cfg
        n = len(blob["latents"])
        draw = random.Random(cfg.seed)
        self.items = [(i % n, draw.choices(TASKS, weights=cfg.task_weights)[0]) for i in range(n * cfg.items_per_clip)]
        self.rng = random.Random(cfg.seed + 1)
        f = blob["latents"][0].shape[1:]
        self.shapes = [((f[0] + 1) if task == "reference" else f[0], *f[1:]) for _, task in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        clip, task = self.items[i]
        b, rng = self.blob, self.rng
        z, caption = b["latents"][clip], b["captions"][clip]
        colour = caption.split()[1]
        if task == "control":
            vace = b["control"][clip]
            if rng.random() < self.cfg.prompt_swap:
                caption = _swap(caption, rng, 4, D.DIRECTIONS)
        elif task == "reference":
            vace = b["reference"][colour]
            z = torch.cat([b["ref_latent"][colour], z], dim=1)
            if rng.random() < self.cfg.prompt_swap:
                caption = _swap(caption, rng, 1, D.COLOURS)
        else:
            vace = b["plain"]
        text = rng.choice(b["uncond"]) if rng.random() < self.cfg.caption_dropout else b["embeddings"][caption]
        return z, text, vace


def collate_vace(items) -> tuple[torch.Tensor, VaceBatch]:
    """Items ``(latent, text, vace)`` of one latent shape -> ``(latents [B, 16, F, h, w], VaceBatch)``."""
    return (torch.stack([it[0] for it in items]),
            VaceBatch([it[1] for it in items], torch.stack([it[2] for it in items])))


class VaceTrainModel(torch.nn.Module):
    """``(x, timestep, VaceBatch) -> v``: the VACE DiT as ``wan_core.train.train`` calls a model."""

    def __init__(self, dit: torch.nn.Module):
        super().__init__()
        self.dit = dit

    def forward(self, x: torch.Tensor, t: torch.Tensor, ctx: VaceBatch) -> torch.Tensor:
        return self.dit(x, t, ctx.text, vace_context=ctx.vace)


# ----------------------------------------------------------------------------------------- training
class _Budget:
    """The training loop's interrupt: true once ``minutes`` have passed (the loop then checkpoints)."""

    def __init__(self, minutes: float):
        self.end = time.time() + 60 * minutes

    def __call__(self) -> bool:
        return time.time() > self.end


def train_branch(out: str, cfg: VaceTrainConfig, dit, blob: dict) -> dict:
    """Train the VACE branch on ``blob`` (``encode_data``) from the demo ``dit``; writes ``out/vace.safetensors``
    when ``cfg.steps`` are done (else stops at the time budget, resumable). Returns a summary."""
    from safetensors.torch import save_file

    from ..train.loop import TrainConfig, train
    from .train import native_bf16

    model = vace_dit_from(dit)
    if cfg.start is not None:
        from safetensors.torch import load_file

        branch = load_file(cfg.start)
        missing = [k for k in vace_state(model) if k not in branch]
        if missing:
            raise ValueError(f"--start {cfg.start}: not a demo VACE branch file (missing {missing[:2]})")
        model.load_state_dict({k: v.float() for k, v in branch.items()}, strict=False)
    model.requires_grad_(False)
    for part in (model.vace_blocks, model.vace_patch_embedding):
        assert part is not None
        part.requires_grad_(True)
    tcfg = TrainConfig(max_steps=cfg.steps, batch_size=cfg.batch, lr=cfg.lr, warmup_steps=cfg.warmup,
                       lr_schedule="cosine", min_lr_ratio=0.05, seed=cfg.seed, clip_extreme_floor=20.0,
                       timestep_shift=cfg.timestep_shift, precision="bf16" if native_bf16() else "fp32",
                       attention_kernel="math", fused_adamw=True, checkpoint_dir=os.path.join(out, "vace_ckpt"),
                       checkpoint_every=100, keep_last=2)
    t0 = time.time()
    result = train(VaceTrainModel(model), VaceTrainDataset(blob, cfg), tcfg, collate_fn=collate_vace,
                   resume="latest", interrupt=_Budget(cfg.max_minutes))
    tail = result.losses[-200:]
    summary = {"step": result.step, "wall_s": round(time.time() - t0, 1), "precision": tcfg.precision,
               "loss_first_100": sum(result.losses[:100]) / max(len(result.losses[:100]), 1),
               "loss_last_200": sum(tail) / max(len(tail), 1), "done": result.step >= cfg.steps}
    if summary["done"]:
        path = os.path.join(out, "vace.safetensors")
        save_file(vace_state(model, VACE_FILE_DTYPE), path + ".tmp")
        os.replace(path + ".tmp", path)
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m wan_core.demo.vace_train",
                                 description="train the demo model's VACE branch (docs/demo_model.md)")
    ap.add_argument("--out", required=True, help="output folder; the same command resumes there")
    ap.add_argument("--steps", type=int, default=VaceTrainConfig.steps)
    ap.add_argument("--clips", type=int, default=VaceTrainConfig.clips)
    ap.add_argument("--minutes", type=float, default=VaceTrainConfig.max_minutes,
                    help="wall-clock budget of this run (checkpointed; run again to go on)")
    ap.add_argument("--start", default=None, help="a branch file to go on from (a second phase)")
    ap.add_argument("--task-weights", default=None, metavar="C,R,P",
                    help="shares of the control, reference and plain tasks (default %s)"
                         % ",".join(map(str, VaceTrainConfig.task_weights)))
    ap.add_argument("--lr", type=float, default=VaceTrainConfig.lr)
    ap.add_argument("--prompt-swap", type=float, default=VaceTrainConfig.prompt_swap)
    args = ap.parse_args(argv)
    try:
        weights = tuple(float(w) for w in args.task_weights.split(",")) if args.task_weights else None
    except ValueError:
        weights = ()
    if (args.steps < 1 or args.clips < 1 or args.minutes <= 0 or args.lr <= 0 or not 0 <= args.prompt_swap <= 1
            or (weights is not None and (len(weights) != 3 or min(weights) < 0 or sum(weights) <= 0))):
        print("vace_train: --steps, --clips, --minutes and --lr must be positive, --prompt-swap in [0, 1], "
              "--task-weights three non-negative numbers C,R,P", file=sys.stderr)
        return 2
    cfg = VaceTrainConfig(steps=args.steps, clips=args.clips, max_minutes=args.minutes, start=args.start, lr=args.lr,
                          prompt_swap=args.prompt_swap, task_weights=weights or VaceTrainConfig.task_weights)
    torch.set_num_threads(cfg.threads)
    from . import load_demo_models

    dit, vae, te = load_demo_models()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "vace_data.pt")
    if not os.path.exists(path):
        t0 = time.time()
        blob = encode_data(vae, te, cfg, progress=lambda d, n: print(f"encode {d}/{n}", file=sys.stderr))
        torch.save(blob, path + ".tmp")
        os.replace(path + ".tmp", path)
        print(f"vace_train: encoded {len(blob['latents'])} clips in {time.time() - t0:.0f} s", file=sys.stderr)
    blob = torch.load(path, weights_only=False)
    print(train_branch(args.out, cfg, dit, blob), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
