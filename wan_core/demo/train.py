"""Train the built-in demo model: ``python -m wan_core train-demo --out DIR``.

Five resumable stages, each skipped when its output exists in ``DIR``:

1. ``text_encoder.safetensors``: a SentencePiece tokenizer trained on the caption vocabulary (embedded as
   ``spiece_model``) and a tiny umT5 encoder (``transformers`` code, as the real one) from its seeded random
   initialisation through a short grounding pretraining (``text_pretrain``), then frozen: the DiT learns to read
   its outputs (``train_text_encoder`` trains it further with the DiT in stage 4 and rewrites the file).
2. ``vae.safetensors``: a small Wan 2.1 VAE (same module code, smaller widths) trained for reconstruction on
   crops of synthetic clips, then its latent convs rescaled so raw latents have Wan 2.1's per-channel mean
   and std (the pipeline normalises with those fixed constants, ``latent_format``) and the latent channels'
   spectrum flattened (``shape_latent_spectrum_``; after a block-PCA recipe, set to the code's component
   variances), both folded exactly into ``conv1``/``conv2``.
3. ``latents.pt``: the training clips encoded once with that VAE (normalised latents) and their prompt
   embeddings.
4. ``dit.safetensors``: a small Wan DiT trained with ``wan_core.train.train`` (flow matching, logit-normal
   timesteps, bucket sampler, adaptive clipping), checkpoints in ``dit_ckpt/`` so an interrupted run resumes.
5. the VAE decoder trained further with the encoder frozen (the latent space the DiT learned stays valid);
   ``vae.safetensors`` is rewritten at the end.

Losses go to ``DIR/log.jsonl`` and the stage summaries to ``DIR/summary.json``.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field, replace

import torch

from . import data as D
from ._trainable import autograd_safe_vae
from ..dit.options import FLOAT_WEIGHTS  # dtypes by name: DemoTrainConfig.dit_file_dtype
from ..train.loop import check_attention_kernel  # DemoTrainConfig.dit_attention_kernel, checked before stage 1
from ..cli.train_demo import add_arguments as add_arguments  # the command's flags (torch-free)
from .model import DEMO_DEFAULTS, DEMO_DIT, DEMO_TEXT_ENCODER, DEMO_VAE


@dataclass(frozen=True)
class VAEPhase:
    """One phase of the VAE stage: ``steps`` optimizer steps on batches of ``batch`` crops whose length is drawn
    from ``frames``, AdamW peaking at ``lr`` (warm-up, cosine), gradients clipped to ``clip``; object pixels
    weighted ``object_weight`` (``reconstruction_loss``). ``pca_weight`` > 0 adds, with that weight, the
    distillation of a linear code of the VAE's shape (``block_pca``): the encoder's latents regress its normalised
    coefficients and the decoder learns to decode them."""

    steps: int
    batch: int
    frames: tuple[int, ...]
    lr: float
    clip: float = 5.0
    object_weight: float = 1.0
    pca_weight: float = 0.0


VAE_RECIPES: dict[str, tuple[VAEPhase, ...]] = {
    # the recipe of the files shipped until run 12 (runs 1-8): 22.0 dB (run 8)
    "reconstruction": (
        # short crops first: cheap steps that learn the spatial code
        VAEPhase(steps=2000, batch=4, frames=(5,), lr=1e-3),
        # then 9 and 17 frames, so the encoder's causal caches learn to carry 2-4 chunks (5-frame crops alone let
        # the latent scale grow ~10x from frame 0 to frame 4), with object colours (what prompts name) weighted
        VAEPhase(steps=1000, batch=2, frames=(5, 9, 17), lr=5e-4, clip=1.0, object_weight=5.0),
    ),
    # One phase distilled from the linear block-PCA code (``block_pca``: 28.6 dB on held-out clips) beside the
    # reconstruction loss, on 5-, 9- and 17-frame crops from the start (a VAE trained on 5-frame crops alone fell
    # to 9 dB on 17-frame clips). On 6 held-out 64x64x17 clips: 28.3 dB after these 1,500 steps, 29.8 after the
    # decoder stage with objects weighted 5 (run 9), 30.85 with the plain MSE (run 13's VAE), where
    # "reconstruction" sat near 16.5 dB at step 800 and its VAE ends at 22.0. The default since run 12: the
    # 4-block DiT followed fewer prompts on its richer latents (83.8 % of 240 held-out pairs against 88.8 %), the
    # 6-block one as many (88.8 %; docs/demo_model.md, runs 9-12)
    "block-pca": (VAEPhase(steps=1500, batch=4, frames=(5, 9, 17), lr=1e-3, clip=1.0, pca_weight=1.0),),
}


@dataclass
class DemoTrainConfig:
    """Step counts and sizes of the shipped run (see docs/demo_model.md)."""

    vae_phases: tuple[VAEPhase, ...] = field(default_factory=lambda: VAE_RECIPES["block-pca"])
    vae_crop: int = 32
    vae_pca_clips: int = 300  # training clips the block-PCA code of ``pca_weight`` phases is fitted on
    vae_latent_noise: float = 0.02  # latent noise std, relative to the batch's latent std
    # the normalised latents' channel covariance gets its eigenvalues raised to this power (``shape_latent_spectrum_``;
    # 1 keeps them: one direction holds ~95 % of the variance). On run 5's VAE and text encoder,
    # 0.5 let the DiT follow 85.0 % of the 120 held-out pairs against 76.7 % (singles 94.8 against 88.5 %; 240
    # pairs with the validation ones: 83.3 against 79.2 %); the command from scratch with it (run 7, shipped):
    # 87.5 %, singles 100 % (its VAE, 22.1 dB against run 5's 25.1, comes from stage 2 on a different CPU, not
    # from the map: run 8 trained the decoder without it and ended at 22.0)
    latent_spectrum_power: float = 0.5
    latent_spectrum_clips: int = 64  # training clips the spectrum is measured on
    # recipes with a block-PCA phase instead whiten the latents and give channel c the code's component c variance
    # to this power (``spectrum_map(channel_variances=...)``). Run 9 (block-pca recipe, the eigenvalue map of power
    # 0.5 on its already flat latents: eigenvalues 1.42 to 0.71) followed 80.0 % of the 120 held-out pairs (240
    # with the validation ones: 79.6 %); the same VAE with this map (power 1: 8.9 to 0.06), the DiT trained again,
    # 81.7 % (240: 83.8 %), against the reconstruction recipe's 87.5 % (88.8 %); the 6-block DiT on it (run 12):
    # 84.2 % (240: 88.8 %); the same trained at the sampler's timestep shift (run 14, shipped): 100 % (240: 99.6 %)
    latent_spectrum_pca_power: float = 1.0
    # 800 left the DiT memorising positions (10 % of held-out prompts followed); 8,000 keep the 20,000 DiT steps
    # below at 20 passes over the data (4,000 clips at 7,000 steps: 14)
    num_clips: int = 8000
    # share of the DiT's training clips with two objects (the VAE's crops keep ``data.TWO_OBJECT_SHARE``); 0.5
    # on run 8's VAE and text encoder followed 80.8 % against 87.5 %, two-object pairs 6 of 24 against 9
    dit_two_object_share: float = D.TWO_OBJECT_SHARE
    # the score grew with the clips the DiT saw (batch 8: 3,000 steps 12.5 %, 5,000 24.2 %, 7,000 36.7 % of 120
    # held-out prompt/seed pairs); 20,000 (77.5 %; 30,000: 73.3 %) fit the hour with the 4-block DiT on a 2-core
    # Zen 4 with bf16. The 6-block DiT takes 1.6x the step time: the command took 39.5 minutes from scratch on a
    # 2-core Zen 5 (run 18, with the compiled blocks below) and 65.5 on the slower 2-core Zen 4 (run 17);
    # --dit-steps 10000 keeps the hour on the slower one; longer without bf16 instructions (docs/demo_model.md)
    dit_steps: int = 20000
    dit_batch: int = 8
    # 1e-3 and 2e-3 lowered the loss (object weights 5, 3,000 steps: 0.285 / 0.278 against 0.311) but followed
    # 10.8 / 12.5 % of 120 held-out pairs against 21.7 % (docs/demo_model.md): the loss does not rank recipes here
    dit_lr: float = 4e-4
    dit_warmup: int = 100
    dit_spike_floor: float = 20.0  # gradient norms of 5 are ordinary early in this small model's training
    # Latent cells an object covers can weigh up to this much in the flow-matching loss (objects cover ~5 % of
    # a clip). Weight 5 learnt faster (3,000 steps: 21.7 % of 120 held-out prompt/seed pairs followed against
    # 12.5 %) but ended level (5,000 steps: 24.2 % both), so the shipped recipe keeps 1 (docs/demo_model.md).
    dit_object_weight: float = 1.0
    # The training timesteps get the shift the demo samples with (DEMO_DEFAULTS.shift = 3): logit-normal draws
    # alone put 1.4 % of the training at noise levels above 0.9, where 5 of the 20 sampling steps run and where
    # the layout (which object goes where, and which way) is decided. On run 13's latents, shift 3 followed 100 %
    # of the 120 scored pairs and 99.2 % of the validation ones against 81.7 / 86.7 % unshifted (two-object
    # pairs 47 of 48 against 19); docs/demo_model.md, "The training timestep shift"
    dit_timestep_shift: float = DEMO_DEFAULTS.shift
    dit_ema_decay: float = 0.0  # a 0.999 parameter average scored the same as the last weights
    # "auto": bf16 autocast (weights and optimizer state stay fp32) where the CPU multiplies bf16 natively
    # (AVX512-BF16 or AMX: 1.8x the fp32 steps/s of this DiT on a 2-core Zen 4), fp32 elsewhere (AVX2 machines
    # run bf16 several times slower than fp32)
    dit_precision: str = "auto"
    # the DiT's attention kernel and optimizer (``TrainConfig.attention_kernel`` / ``fused_adamw``): the same
    # computation in other kernels. On these 48-80-token sequences the math kernel and fused AdamW run a bf16 step
    # 1.12x (1 thread) and 1.20x (2 threads) as fast as torch's flash kernel and per-tensor AdamW on a 2-core
    # Zen 4, and fp32 at 0.99x (bench/train_kernels.py). Runs 12 and 13 used the old pair; run 14 (shipped) these
    dit_attention_kernel: str = "math"
    dit_fused_adamw: bool = True
    # regional torch.compile of the DiT's blocks (``TrainConfig.compile_blocks``): inductor fuses the blocks'
    # elementwise work around the matrix products: bf16 steps 1.31x (one thread) and 1.39x (two) as fast on the
    # slower 2-core Zen 4 (bench/train_kernels.py --compile), built in the first minute or two; most of the gain is
    # in the steps beside the decoder (docs/demo_model.md, "Compiled blocks"). Without a C++ compiler the blocks
    # run eager after one warning; a compiled run that fails goes on eager from its last checkpoint
    dit_compile: bool = True
    # dtype of the weights in dit.safetensors (training and checkpoints stay fp32): "fp16" halves the file, so the
    # 6-block DiT (21.6 MB in fp32) fits the 25 MB budget beside the VAE; its weights are below 2 in magnitude,
    # and the fp16 file scored what the fp32 one did (run 12, docs/demo_model.md)
    dit_file_dtype: str = "fp16"
    caption_dropout: float = 0.1
    # True: the umT5 encoder trains with the DiT (stage 4, ``TextConditionedDiT``) instead of staying frozen after
    # stage 1. Tried before the grounding stage existed (from the random encoder) because two-object prompts mostly
    # failed by both objects taking one direction (33 of 54 misses on 48 two-object generations); on run 1's
    # latents it followed 70.0 % of the 120 held-out pairs against 77.5 % frozen (two objects 12.5 against 20.8 %)
    train_text_encoder: bool = False
    # Grounding pretraining of the encoder before anything reads it (``text_pretrain``): a reader that sees the
    # token states without positions, as the DiT does, answers 2-object captions right 32 % of the time on the
    # random encoder and 100 % after these steps (about 25 s); 0 keeps the random initialisation. With the same
    # latents the DiT then follows 76.7 % of the 120 held-out pairs against 71.7 % (two objects 29.2 against 8.3 %)
    text_grounding_steps: int = 1500
    # decoder-only fine-tune beside the DiT (the latent space stays fixed): on run 1's VAE, 1,500 steps reached
    # 21.6 dB on held-out clips, 6,000 steps 24.6 dB; at one thread beside the DiT it still ends before the DiT
    decoder_steps: int = 6000
    decoder_lr: float = 5e-4
    # object pixels' weight in the decoder stage's loss: 5 for the reconstruction recipe (its worst pixels were the
    # objects'); recipes with a block-PCA phase use ``decoder_pca_object_weight``: 1 (the plain MSE the PSNR
    # measures) took run 13's stage-2 VAE to 30.85 dB on held-out clips against 29.76 with 5, the held-out clips
    # still keeping their caption 40 of 40 after the round trip (docs/demo_model.md)
    decoder_object_weight: float = 5.0
    decoder_pca_object_weight: float = 1.0
    seed: int = 0
    # threads of the stages that run alone (1-3, and the DiT once the decoder's process is done); the DiT and
    # decoder stages take one each while they share the machine
    threads: int = field(default_factory=lambda: min(2, os.cpu_count() or 1))
    parallel: bool = True  # the decoder fine-tune in a second process beside the DiT stage

    def __post_init__(self):
        if self.dit_precision not in ("auto", "fp32", "bf16"):
            raise ValueError(f"dit_precision must be 'auto', 'fp32' or 'bf16', got {self.dit_precision!r}")
        if self.dit_file_dtype not in FLOAT_WEIGHTS:
            raise ValueError(f"dit_file_dtype must be one of {sorted(FLOAT_WEIGHTS)}, got {self.dit_file_dtype!r}")
        check_attention_kernel(self.dit_attention_kernel, "dit_attention_kernel")

    @property
    def vae_steps(self) -> int:
        return sum(p.steps for p in self.vae_phases)

    def vae_phase(self, step: int) -> tuple[VAEPhase, int]:
        """(phase, step within it) of global VAE step ``step``."""
        for phase in self.vae_phases:
            if step < phase.steps:
                return phase, step
            step -= phase.steps
        raise IndexError(step)


def native_bf16() -> bool:
    """Whether this CPU has bf16 matrix instructions (AVX512-BF16 or AMX), where bf16 autocast is the fast path."""
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def dit_precision(cfg: DemoTrainConfig) -> str:
    """The DiT stage's training precision: ``cfg.dit_precision`` with "auto" resolved for this CPU."""
    if cfg.dit_precision != "auto":
        return cfg.dit_precision
    return "bf16" if native_bf16() else "fp32"


def decoder_object_weight(cfg: DemoTrainConfig) -> float:
    """The decoder stage's object-pixel weight: ``decoder_pca_object_weight`` for a recipe with a block-PCA phase,
    ``decoder_object_weight`` otherwise."""
    pca = any(p.pca_weight > 0 for p in cfg.vae_phases)
    return cfg.decoder_pca_object_weight if pca else cfg.decoder_object_weight


def _log(out: str, **record) -> None:
    with open(os.path.join(out, "log.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _summary(out: str, **update) -> dict:
    path = os.path.join(out, "summary.json")
    summary = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else {}
    summary.update(update)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    os.replace(path + ".tmp", path)
    return summary


def _save(tensors: dict, path: str, metadata: dict | None = None) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, path + ".tmp", metadata=metadata)
    os.replace(path + ".tmp", path)


# ----------------------------------------------------------------------------------------- 1. text encoder
def all_captions() -> list[str]:
    """Every single-object caption and every two-object caption of the grammar (tokenizer training text)."""
    singles = [f"a {c} {s} moving {d}" for c in D.COLOURS for s in D.SHAPES for d in D.DIRECTIONS]
    pairs = [f"{a} and {b}" for a in singles for b in singles if a.split()[1] != b.split()[1]]
    return singles + pairs


def train_tokenizer(vocab_size: int = DEMO_TEXT_ENCODER.vocab_size) -> bytes:
    """A SentencePiece word model with umT5's special ids (pad 0, EOS 1, unk 2, no BOS) on the captions: one
    token per caption word; any other word becomes the unknown token."""
    import sentencepiece as spm

    rng = random.Random(0)
    lines = all_captions()
    rng.shuffle(lines)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines[:4000]), model_writer=buf, vocab_size=vocab_size, model_type="word",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0, minloglevel=2, num_threads=1,
        hard_vocab_limit=False,
    )
    return buf.getvalue()


def stage_text_encoder(out: str, cfg: DemoTrainConfig) -> None:
    from tqdm.auto import tqdm

    from ..text.encoder import build_umt5, load_text_encoder
    from ..text.keys import TIED_EMBED_KEY
    from .text_pretrain import GroundingConfig, pretrain_grounding

    path = os.path.join(out, "text_encoder.safetensors")
    if os.path.exists(path):
        return
    spiece = train_tokenizer()
    torch.manual_seed(cfg.seed + 1)
    model = build_umt5(DEMO_TEXT_ENCODER, device="cpu")  # transformers' own initialisation, seeded
    def file_tensors(encoder) -> dict:  # the encoder's weights (tied embedding once) and the tokenizer
        sd = {k: v for k, v in encoder.state_dict().items() if k != TIED_EMBED_KEY}
        sd["spiece_model"] = torch.frombuffer(bytearray(spiece), dtype=torch.uint8)
        return sd

    sd = file_tensors(model)
    if cfg.text_grounding_steps <= 0:
        _save(sd, path)
        _summary(out, text_encoder={"grounding": None, "trained_with_dit": False, "spiece_pieces": len(spiece)})
        return
    # through the public loader, so the encoder trains exactly as the pipeline will run it
    _save(sd, init := os.path.join(out, "text_encoder.init.safetensors"))
    te = load_text_encoder(init, dtype=torch.float32, cache_size=0)
    os.remove(init)
    t0 = time.time()
    with tqdm(total=cfg.text_grounding_steps, desc="text grounding", dynamic_ncols=True) as bar:
        def progress(step, total, loss):
            bar.update(1)
            if step % 100 == 0 or step == total:
                bar.set_postfix(loss=f"{loss:.4f}")
                _log(out, stage="text_encoder", step=step, loss=loss)

        report = pretrain_grounding(te, GroundingConfig(steps=cfg.text_grounding_steps, seed=cfg.seed + 7), progress)
    _save(file_tensors(te.model), path)
    _summary(out, text_encoder={"grounding": {**report, "wall_s": round(time.time() - t0, 1)},
                                "trained_with_dit": False, "spiece_pieces": len(spiece)})


# ----------------------------------------------------------------------------------------- 2. VAE
def _vae_batch(rng: random.Random, batch: int, frame_choices: tuple[int, ...], crop: int) -> torch.Tensor:
    """[batch, 3, T, crop, crop] crops of random training clips (half of them centred on an object), T drawn
    from ``frame_choices``."""
    crops: list[torch.Tensor] = []
    c = crop
    frames = frame_choices[0] if len(frame_choices) == 1 else rng.choice(frame_choices)
    while len(crops) < batch:
        spec = D.clip_spec(rng.randrange(D.TRAIN_SEED_LIMIT))
        if spec.frames < frames:
            spec = D.clip_spec(spec.seed, width=spec.width, height=spec.height, frames=frames)
        video = D.render(spec)
        t0 = rng.randrange(0, spec.frames - frames + 1)
        if rng.random() < 0.5:
            ox, oy = spec.objects[0].centre(t0 + frames // 2)
            x0 = int(min(max(ox - c / 2 + rng.uniform(-6, 6), 0), spec.width - c))
            y0 = int(min(max(oy - c / 2 + rng.uniform(-6, 6), 0), spec.height - c))
        else:
            x0, y0 = rng.randrange(spec.width - c + 1), rng.randrange(spec.height - c + 1)
        crops.append(video[:, t0:t0 + frames, y0:y0 + c, x0:x0 + c])
    return torch.stack(crops)


def _lr(step: int, total: int, peak: float, warmup: int = 100, floor: float = 0.05) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    p = (step - warmup) / max(total - warmup, 1)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))


def object_pixels(x: torch.Tensor, channel_dim: int) -> torch.Tensor:
    """Bool mask of the saturated (object) pixels of ``x`` in [-1, 1], the channel dim kept with size 1: the
    detector's saturation threshold (0.3 in [0, 1] units); the backgrounds never pass it."""
    return (x.amax(channel_dim, keepdim=True) - x.amin(channel_dim, keepdim=True)) > 0.6


def reconstruction_loss(y: torch.Tensor, x: torch.Tensor,
                        object_weight: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, plain MSE) of a reconstruction ``y`` of ``x`` [B, 3, T, H, W] in [-1, 1]: MSE + 0.1 L1, each pixel
    weighted by ``object_weight`` where ``x`` is a saturated (object) colour, 1 elsewhere (weights averaging 1)."""
    err = y - x
    mse = torch.mean(err ** 2)
    if object_weight == 1.0:
        return mse + 0.1 * torch.mean(err.abs()), mse
    sat = object_pixels(x, 1)
    w = 1.0 + (object_weight - 1.0) * sat.float()
    w = w / w.mean()
    return torch.mean(w * (err ** 2 + 0.1 * err.abs())), mse


def _final(mse: torch.Tensor | None) -> float | None:
    """The last step's MSE for a stage summary; None when this run trained no step."""
    return None if mse is None else float(mse)


def psnr_of_mse(mse: float) -> float:
    """PSNR in dB for videos in [-1, 1] (peak-to-peak 2)."""
    return 10 * math.log10(4.0 / max(mse, 1e-12))


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR in dB of videos in [-1, 1] (peak-to-peak 2)."""
    return psnr_of_mse(float(torch.mean((a.float() - b.float()) ** 2)))


def _noise_generator(seed: int, step: int) -> torch.Generator:
    """The latent noise of one VAE step: a pure function of the step, so a resumed stage draws what an
    uninterrupted one would have (torch's global stream is not in the checkpoint)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def _reconstruction_step(model, x: torch.Tensor, opt, params, noise: float, object_weight: float, clip: float,
                         train_encoder: bool, gen: torch.Generator, pca=None,
                         pca_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step of VAE reconstruction on ``x``; returns the detached (loss, MSE). The latent gets
    noise of ``noise`` times its std (drawn from ``gen``), so the decoder tolerates small latent errors. With a
    ``pca`` code (``block_pca.BlockPCA``) and ``pca_weight`` > 0 the loss adds, times that weight, the latent's
    MSE to the code's coefficients and the MSE of the decoder's reconstruction from them."""
    with torch.set_grad_enabled(train_encoder):
        z = model.encode_chunk(x, None)
    distill = None
    if pca is not None and pca_weight > 0:
        c = pca.code(x)
        distill = torch.mean((z - c) ** 2) + torch.mean((model.decoder(model.conv2(c)) - x) ** 2)
    z = z + noise * z.detach().std() * torch.randn(z.shape, generator=gen, dtype=z.dtype)
    y = model.decoder(model.conv2(z))
    loss, mse = reconstruction_loss(y, x, object_weight)
    if distill is not None:
        loss = loss + pca_weight * distill
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    return loss.detach(), mse.detach()


CHECKPOINT_EVERY = 250  # VAE and decoder stages: optimizer steps between resumable checkpoints


def _after_step(out: str, stage: str, bar, step: int, total: int, loss: torch.Tensor, mse: torch.Tensor, model,
                opt, ckpt: str) -> None:
    """Progress bar, a log line every 50 steps and a resumable checkpoint every ``CHECKPOINT_EVERY``."""
    bar.update(1)
    bar.set_postfix(psnr=f"{psnr_of_mse(float(mse)):.1f}")
    if step % 50 == 0 or step == total - 1:
        _log(out, stage=stage, step=step, loss=float(loss), mse=float(mse), psnr=round(psnr_of_mse(float(mse)), 2))
    if (step + 1) % CHECKPOINT_EVERY == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)


# the spectrum map folded into the VAE at the end of stage 2 (``a``, ``b``): the decoder stage unfolds it to train
LATENT_MAP = "latent_map.safetensors"


def stage_vae(out: str, cfg: DemoTrainConfig) -> None:
    from tqdm.auto import tqdm

    from ..vae.model import WanVAEModel

    path = os.path.join(out, "vae.safetensors")
    if os.path.exists(path):
        return
    ckpt = os.path.join(out, "vae_ckpt.pt")
    torch.manual_seed(cfg.seed + 2)
    model = WanVAEModel(DEMO_VAE)
    with torch.no_grad():  # RMS-norm gains start at 1 (the module creates them empty), biases at 0
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
    decay = [p for n, p in model.named_parameters() if not n.endswith(("bias", "gamma"))]
    no_decay = [p for n, p in model.named_parameters() if n.endswith(("bias", "gamma"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.vae_phases[0].lr)
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    t0 = time.time()
    pca = None
    if any(p.pca_weight > 0 for p in cfg.vae_phases):
        from .block_pca import fit_demo_block_pca

        pca = fit_demo_block_pca(DEMO_VAE.z_dim, cfg.vae_pca_clips)  # deterministic: a resumed stage fits the same code
    model.train()
    with autograd_safe_vae():
        bar = tqdm(total=cfg.vae_steps, initial=start, desc="vae", dynamic_ncols=True)
        params = list(model.parameters())
        mse = None  # stays None when the checkpoint is at the last step (stopped while the maps were computed)
        for step in range(start, cfg.vae_steps):
            phase, k = cfg.vae_phase(step)
            rng = random.Random(cfg.seed * 1_000_003 + step)
            x = _vae_batch(rng, phase.batch, phase.frames, cfg.vae_crop)
            for g in opt.param_groups:
                g["lr"] = _lr(k, phase.steps, phase.lr)
            loss, mse = _reconstruction_step(model, x, opt, params, cfg.vae_latent_noise, phase.object_weight,
                                             phase.clip, train_encoder=True, gen=_noise_generator(cfg.seed + 7, step),
                                             pca=pca, pca_weight=phase.pca_weight)
            _after_step(out, "vae", bar, step, cfg.vae_steps, loss, mse, model, opt, ckpt)
        bar.close()
    model.eval()
    whiten_latents_(model)
    spectrum = None
    if pca is not None or cfg.latent_spectrum_power != 1:
        # a distilled VAE's channels are the code's components: they get the code's variances (its spread of
        # ~150x is what the reconstruction recipe's latents keep after their map); otherwise the eigenvalue power
        power, variances = ((cfg.latent_spectrum_pca_power, pca.scale ** 2) if pca is not None
                            else (cfg.latent_spectrum_power, None))
        a, b, spectrum = shape_latent_spectrum_(model, power, cfg.latent_spectrum_clips, variances)
        # before the VAE file, which marks the stage done: the decoder stage trains behind the unfolded map
        _save({"a": a, "b": b}, os.path.join(out, LATENT_MAP))
    _save(model.state_dict(), path)
    _summary(out, vae={"steps": cfg.vae_steps, "wall_s": round(time.time() - t0, 1),
                       "final_mse": _final(mse), "params": sum(p.numel() for p in model.parameters()),
                       "latent_spectrum": spectrum})


@torch.no_grad()
def _fold_latent_map_(model, a: torch.Tensor, b: torch.Tensor) -> None:
    """Make the raw latents ``a @ z + b`` (``a`` [C, C] invertible, ``b`` [C]) where they were ``z``: ``a`` folded
    into ``conv1``'s mean rows, its inverse into ``conv2``, so encoding then decoding is unchanged."""
    zd = model.conv2.weight.shape[1]
    a, b = a.double(), b.double()
    w1, b1 = model.conv1.weight, model.conv1.bias  # [2z, 2z, 1, 1, 1]: rows :z give the mean
    w1[:zd] = torch.einsum("ij,jk...->ik...", a, w1[:zd].double()).to(w1.dtype)
    b1[:zd] = (a @ b1[:zd].double() + b).to(b1.dtype)
    w2, b2 = model.conv2.weight, model.conv2.bias  # conv2(z) = W z + c with z = a^-1 (z' - b)
    w2_new = torch.einsum("oj...,jk->ok...", w2.double(), torch.linalg.inv(a))
    b2.copy_((b2.double() - w2_new.flatten(1) @ b).to(b2.dtype))
    w2.copy_(w2_new.to(w2.dtype))


@torch.no_grad()
def whiten_latents_(model) -> None:
    """Fold an exact per-channel affine map into ``conv1`` (mean rows) and ``conv2`` so that the raw latents of
    training clips have Wan 2.1's ``LATENTS_MEAN`` / ``LATENTS_STD``: the DiT then sees ~unit-variance latents
    through the pipeline's fixed normalisation (``latent_format.to_model``)."""
    from .. import latent_format as LF

    zs = [model.encode_chunk(D.make_clip(s, width=64, height=64, frames=17)[0][None], None) for s in range(8)]
    z = torch.cat([q.transpose(0, 1).flatten(1) for q in zs], dim=1)  # [C, N]
    m, s = z.mean(1), z.std(1).clamp_min(1e-4)
    a = torch.tensor(LF.LATENTS_STD) / s
    _fold_latent_map_(model, torch.diag(a), torch.tensor(LF.LATENTS_MEAN) - a * m)


def spectrum_map(z: torch.Tensor, power: float,
                 channel_variances: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(m, mu, eigenvalues)`` for normalised latents ``z`` [C, N]: ``m @ (z - mu)`` has covariance
    ``U diag(k lam^power) U^T`` (``U, lam``: the eigenvectors and eigenvalues of ``z``'s covariance, ``k`` so the
    trace stays ``C``): power 1 keeps the spectrum, 0 whitens it.

    With ``channel_variances`` [C] (``v``) the covariance is ``diag(k v^power)`` instead: ``z`` is whitened by
    ``cov^-1/2`` (of all whitenings the one closest to the identity, so channel ``c`` stays what the encoder
    learnt there: the block-PCA code's component ``c``) and channel ``c`` scaled to its variance."""
    z = z.double()
    mu = z.mean(1)
    lam, u = torch.linalg.eigh(torch.cov(z))
    lam = lam.clamp_min(1e-8 * float(lam.max()))
    if channel_variances is None:
        k = z.shape[0] / float((lam ** power).sum())
        m = u @ torch.diag(math.sqrt(k) * lam ** ((power - 1) / 2)) @ u.T
    else:
        v = channel_variances.double() ** power
        m = torch.diag((z.shape[0] * v / v.sum()).sqrt()) @ u @ torch.diag(lam ** -0.5) @ u.T
    return m, mu, lam.flip(0)


@torch.no_grad()
def shape_latent_spectrum_(model, power: float, clips: int = 64,
                           channel_variances: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Reshape the latent space's channel spectrum (``spectrum_map``, ``channel_variances`` included), folded
    exactly into ``conv1``/``conv2``; returns the map of the raw latents folded in (``a``, ``b`` of
    ``_fold_latent_map_``, float64) and the eigenvalues of the normalised latents' channel covariance before and
    after (training clips).

    The demo VAE puts ~95 % of the latent variance in one direction and the rest in fifteen directions 30 to
    40,000x weaker, which the DiT's unit-variance noise drowns at the first steps of the schedule, long before
    the strong one. Power 0.5 (the eigenvalues' square roots) lifts them without making the faintest as loud as
    the strongest (docs/demo_model.md)."""
    from .. import latent_format as LF

    def latents():
        zs = [LF.to_model(model.encode_full(D.render(D.clip_spec(s))[None])) for s in D.training_seeds(clips)]
        return torch.cat([q[0].flatten(1) for q in zs], dim=1)  # [C, N]

    m, mu, before = spectrum_map(latents(), power, channel_variances)
    c = m.shape[0]
    mean = torch.tensor(LF.LATENTS_MEAN[:c], dtype=torch.float64)
    std = torch.tensor(LF.LATENTS_STD[:c], dtype=torch.float64)
    # raw' = mean + std * m (to_model(raw) - mu), to_model(raw) = (raw - mean) / std
    a = torch.diag(std) @ m @ torch.diag(1 / std)
    b = mean - a @ mean - std * (m @ mu)
    _fold_latent_map_(model, a, b)
    after = torch.linalg.eigvalsh(torch.cov(latents().double())).flip(0)
    return a, b, {"power": power, "clips": clips, "to_channel_variances": channel_variances is not None,
                  "eigenvalues_before": [round(float(v), 4) for v in before],
                  "eigenvalues_after": [round(float(v), 4) for v in after]}


# ----------------------------------------------------------------------------------------- 3. latents
def stage_latents(out: str, cfg: DemoTrainConfig) -> None:
    from tqdm.auto import tqdm

    from .. import latent_format as LF
    from ..sampling import DEFAULT_NEGATIVE_PROMPT
    from ..text.encoder import load_text_encoder
    from ..vae.loader import load_vae

    path = os.path.join(out, "latents.pt")
    if os.path.exists(path):
        return
    vae = load_vae(os.path.join(out, "vae.safetensors"), dtype=torch.float32)
    te = load_text_encoder(os.path.join(out, "text_encoder.safetensors"), cache_size=0)
    share = cfg.dit_two_object_share
    specs = [D.clip_spec(s, two_object_share=share) for s in D.training_seeds(cfg.num_clips, share)]
    captions = sorted({s.caption for s in specs})
    emb = dict(zip(captions, te.encode(captions)))
    uncond = dict(zip(("", DEFAULT_NEGATIVE_PROMPT), te.encode(["", DEFAULT_NEGATIVE_PROMPT])))
    groups = _shape_groups(specs)
    latents, caps = [], []
    t0 = time.time()
    with torch.no_grad(), tqdm(total=len(specs), desc="encode", dynamic_ncols=True) as bar:
        for group in groups.values():
            for i in range(0, len(group), 8):
                chunk = group[i:i + 8]
                video = torch.stack([D.render(s) for s in chunk])
                z = LF.to_model(vae.model.encode_full(video))
                latents += list(z)
                caps += [s.caption for s in chunk]
                bar.update(len(chunk))
    torch.save({"latents": latents, "captions": caps, "embeddings": emb, "uncond": uncond,
                "seeds": [s.seed for s in specs], "two_object_share": share}, path + ".tmp")
    os.replace(path + ".tmp", path)
    allz = torch.cat([z.flatten(1) for z in latents], 1)
    _summary(out, latents={"clips": len(latents), "two_object_share": share, "wall_s": round(time.time() - t0, 1),
                           "mean": float(allz.mean()), "std": float(allz.std()),
                           "buckets": {"x".join(map(str, k)): len(v) for k, v in groups.items()}})


def _shape_groups(specs) -> dict[tuple, list]:
    """Clip specs grouped by (frames, height, width), in first-seen order: the order of the stored latents."""
    groups: dict[tuple, list] = {}
    for s in specs:
        groups.setdefault((s.frames, s.height, s.width), []).append(s)
    return groups


def latent_object_coverage(video: torch.Tensor, temporal: int = 4, spatial: int = 8) -> torch.Tensor:
    """Fraction of each latent cell's pixels that belong to an object: ``video`` [3, T, H, W] in [-1, 1] ->
    ``[F, H/8, W/8]`` in [0, 1], T = 1 + 4 (F - 1). Latent frame 0 covers video frame 0 and frame f > 0 covers
    frames 4f-3 .. 4f (the causal VAE's grouping); a pixel counts if it is an object (``object_pixels``) in any
    of them."""
    sat = object_pixels(video, 0)[0]  # [T, H, W]
    t = sat.shape[0]
    if (t - 1) % temporal:
        raise ValueError(f"expected 1 + {temporal}n frames, got {t}")
    groups = [sat[:1]] + [sat[1 + temporal * i: 1 + temporal * (i + 1)].any(0, keepdim=True)
                          for i in range((t - 1) // temporal)]
    m = torch.cat(groups).float()[:, None]  # [F, 1, H, W]
    return torch.nn.functional.avg_pool2d(m, spatial)[:, 0]


def object_loss_weights(blob: dict, object_weight: float) -> list[torch.Tensor]:
    """Per-latent loss weights ``1 + (object_weight - 1) * coverage`` ``[1, F, h, w]`` for the stored latents
    (clips rendered again from their seeds: a few seconds)."""
    share = blob.get("two_object_share", D.TWO_OBJECT_SHARE)
    specs = [s for group in _shape_groups([D.clip_spec(s, two_object_share=share) for s in blob["seeds"]]).values()
             for s in group]
    weights = []
    for spec, z in zip(specs, blob["latents"]):
        w = 1.0 + (object_weight - 1.0) * latent_object_coverage(D.render(spec))
        if tuple(w.shape) != tuple(z.shape[1:]):
            raise RuntimeError(f"train-demo: clip {spec.seed} renders to a {tuple(w.shape)} latent grid but its "
                               f"stored latent is {tuple(z.shape[1:])}; delete latents.pt to encode again")
        weights.append(w[None])
    return weights


class LatentDataset(torch.utils.data.Dataset):
    """(normalised latent [16, F, H, W], context); ``dropout`` of the draws use an unconditional context (the
    empty prompt's or the default negative prompt's) so guidance has a baseline. The contexts are the stored
    prompt embeddings [L, D], or ``contexts`` / ``uncond`` given (caption -> token ids, for a text encoder that
    trains with the DiT). With ``weights`` (one per latent, ``object_loss_weights``) items are dicts that carry
    them to the loss."""

    def __init__(self, blob: dict, dropout: float, seed: int = 0, weights: list | None = None,
                 contexts: dict | None = None, uncond: list | None = None):
        self.latents = blob["latents"]
        self.captions = blob["captions"]
        self.contexts = blob["embeddings"] if contexts is None else contexts
        self.uncond = list(blob["uncond"].values()) if uncond is None else uncond
        self.dropout = dropout
        self.rng = random.Random(seed)
        self.shapes = [tuple(z.shape[1:]) for z in self.latents]
        self.weights = weights

    def __len__(self) -> int:
        return len(self.latents)

    def __getitem__(self, i: int):
        if self.rng.random() < self.dropout:
            ctx = self.rng.choice(self.uncond)
        else:
            ctx = self.contexts[self.captions[i]]
        if self.weights is not None:
            return {"latent": self.latents[i], "context": ctx, "weight": self.weights[i]}
        return self.latents[i], ctx


class TextConditionedDiT(torch.nn.Module):
    """The DiT with the umT5 encoder in front, trained together: ``(x, t, token ids [B, L]) -> v``.

    Ids are padded with ``pad_id``; the encoder masks the padding and its rows are zeroed, which is what the
    pipeline's per-prompt states padded by the DiT (``pad_context``) give at inference."""

    def __init__(self, dit: torch.nn.Module, text: torch.nn.Module, pad_id: int):
        super().__init__()
        self.dit = dit
        self.text = text
        self.pad_id = pad_id

    def forward(self, x: torch.Tensor, t: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        mask = ids != self.pad_id
        width = int(mask.sum(1).max())
        ids, mask = ids[:, :width], mask[:, :width]
        states = self.text(input_ids=ids, attention_mask=mask.long()).last_hidden_state  # [B, L, D]
        return self.dit(x, t, states * mask.unsqueeze(-1).to(states.dtype))


def token_contexts(te, prompts, width: int) -> dict[str, torch.Tensor]:
    """prompt -> its token ids (EOS included) padded to ``width`` with the pad id, as ``te`` tokenizes them."""
    from ..text.prompt import clean_prompt

    out = {}
    for p in prompts:
        row = te.tokenizer.token_ids(clean_prompt(p), te.max_length)
        if len(row) > width:
            raise ValueError(f"train-demo: {p!r} is {len(row)} tokens, more than the DiT's text_len {width}")
        ids = torch.full((width,), te.tokenizer.pad_id, dtype=torch.long)
        ids[:len(row)] = torch.tensor(row, dtype=torch.long)
        out[p] = ids
    return out


# ----------------------------------------------------------------------------------------- 4. DiT
def stage_dit(out: str, cfg: DemoTrainConfig) -> None:
    from ..dit.model import WanDiT
    from ..train.loop import TrainConfig, train

    path = os.path.join(out, "dit.safetensors")
    if os.path.exists(path):
        return
    from ..train.grad_clip import GradientSpikeError

    blob = torch.load(os.path.join(out, "latents.pt"), weights_only=False)
    weights = object_loss_weights(blob, cfg.dit_object_weight) if cfg.dit_object_weight != 1.0 else None
    tcfg = TrainConfig(max_steps=cfg.dit_steps, batch_size=cfg.dit_batch, lr=cfg.dit_lr,
                       warmup_steps=cfg.dit_warmup, lr_schedule="cosine", min_lr_ratio=0.05, seed=cfg.seed,
                       clip_extreme_floor=cfg.dit_spike_floor, timestep_shift=cfg.dit_timestep_shift,
                       ema_decay=cfg.dit_ema_decay, precision=dit_precision(cfg),
                       attention_kernel=cfg.dit_attention_kernel, fused_adamw=cfg.dit_fused_adamw,
                       compile_blocks=cfg.dit_compile, checkpoint_dir=os.path.join(out, "dit_ckpt"),
                       checkpoint_every=200, keep_last=2)
    text_path = os.path.join(out, "text_encoder.safetensors")
    te = None
    contexts = uncond = None
    if cfg.train_text_encoder:
        from ..text.encoder import load_text_encoder

        te = load_text_encoder(text_path, dtype=torch.float32, cache_size=0)
        contexts = token_contexts(te, sorted(set(blob["captions"])), DEMO_DIT.text_len)
        uncond = list(token_contexts(te, list(blob["uncond"]), DEMO_DIT.text_len).values())
        initial_text = {k: v.clone() for k, v in te.model.state_dict().items()}
    t0 = time.time()
    for attempt in range(10):
        # a fresh, seeded model each attempt: after a spike, training resumes from the last checkpoint (or the
        # seeded start) with the data past the bad batch (the spike marker), as a restarted command would
        dataset = LatentDataset(blob, cfg.caption_dropout, cfg.seed, weights, contexts, uncond)
        torch.manual_seed(cfg.seed + 3)
        dit = WanDiT(DEMO_DIT)
        with torch.no_grad():  # zero output projection: the untrained model predicts 0 velocity
            dit.head.head.weight.zero_()
            dit.head.head.bias.zero_()
        model: torch.nn.Module = dit
        if te is not None:
            te.model.load_state_dict(initial_text)
            te.model.requires_grad_(True)
            model = TextConditionedDiT(dit, te.model, te.tokenizer.pad_id)
        try:
            result = train(model, dataset, tcfg, resume="latest", interrupt=_ThreadsWhenAlone(out, cfg.threads))
            break
        except GradientSpikeError as e:
            print(f"train-demo: {str(e).splitlines()[0][:160]}; resuming (attempt {attempt + 2})", file=sys.stderr)
            _log(out, stage="dit", spike=str(e)[:300])
        except Exception as e:  # noqa: BLE001 - only with compiled blocks: the eager attempt raises a real error again
            if not tcfg.compile_blocks:
                raise
            why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
            print(f"train-demo: the compiled DiT blocks failed ({why}); going on eager from the last checkpoint",
                  file=sys.stderr)
            _log(out, stage="dit", compile_failed=why)
            tcfg = replace(tcfg, compile_blocks=False)
    else:
        raise RuntimeError("train-demo: the DiT stage hit 10 gradient spikes in a row; see log.jsonl")
    first = result.step - len(result.losses)
    for i in range(0, len(result.losses), 25):
        chunk = result.losses[i:i + 25]
        _log(out, stage="dit", step=first + i, loss=sum(chunk) / len(chunk))
    if result.interrupted or result.step < cfg.dit_steps:
        return
    state = model.state_dict()
    if result.ema is not None:
        state.update(result.ema)
    if te is not None:
        # the encoder first: dit.safetensors marks the stage done, and a rerun before it exists resumes from the
        # last checkpoint (which holds both networks), so the initial encoder in text_encoder.safetensors is
        # never needed again once it is replaced
        _save_trained_text_encoder(text_path, {k[5:]: v for k, v in state.items() if k.startswith("text.")})
        state = {k[4:]: v for k, v in state.items() if k.startswith("dit.")}
        text_summary = {**_summary(out).get("text_encoder", {}), "trained_with_dit": True}
        _summary(out, text_encoder=text_summary)
    file_dtype = FLOAT_WEIGHTS[cfg.dit_file_dtype]
    _save({k: v.to(file_dtype) if v.is_floating_point() else v for k, v in state.items()}, path,
          metadata={"wan_text_len": str(DEMO_DIT.text_len)})
    tail = result.losses[-200:]
    _summary(out, dit={"steps": result.step, "precision": tcfg.precision, "attention_kernel": tcfg.attention_kernel,
                       "fused_adamw": tcfg.fused_adamw, "timestep_shift": tcfg.timestep_shift,
                       "compiled": result.compiled,
                       "wall_s_last_run": round(time.time() - t0, 1),
                       "final_loss_mean_last_200": sum(tail) / max(len(tail), 1),
                       "params": sum(p.numel() for p in dit.parameters()),
                       "clipped": sum(s == "clipped" for s in result.clip_status)})


def _save_trained_text_encoder(path: str, state: dict) -> None:
    """Rewrite ``path`` with the trained encoder weights, the tokenizer (``spiece_model``) kept."""
    from safetensors import safe_open

    from ..text.keys import TIED_EMBED_KEY

    with safe_open(path, "pt") as f:
        spiece = f.get_tensor("spiece_model")
    sd = {k: v for k, v in state.items() if k != TIED_EMBED_KEY}
    sd["spiece_model"] = spiece
    _save(sd, path)


DECODER_DONE = "vae_decoder_done.json"  # written by the decoder stage, in whichever process it ran


class _ThreadsWhenAlone:
    """Called by ``train`` after every optimizer step (as its ``interrupt``; it never stops training): while the
    decoder stage's process shares the machine the DiT keeps its one thread, and once that stage has written its
    done file the DiT takes ``threads`` (measured on 2 cores: 4.9 optimizer steps/s against 3.0 with one)."""

    def __init__(self, out: str, threads: int):
        self.done = os.path.join(out, DECODER_DONE)
        self.threads = threads

    def __call__(self) -> bool:
        if torch.get_num_threads() < self.threads and os.path.exists(self.done):
            torch.set_num_threads(self.threads)
        return False


# ----------------------------------------------------------------------------------------- 5. VAE decoder
def stage_vae_decoder(out: str, cfg: DemoTrainConfig) -> None:
    """More reconstruction training for the decoder (and ``conv2``) only: the encoder, hence the latent space
    the DiT was trained in, stays fixed, so this can run after (or beside) the DiT stage.

    It trains in the latent coordinates from before the spectrum map (``LATENT_MAP``), folded back in at the end
    (``conv1`` restored bit for bit), so AdamW's per-weight steps on ``conv2`` do not depend on the map's power.
    Measured: no difference on the held-out clips (22.01 dB, run 8, against 22.12 behind the map, run 7, the
    same stage-2 VAE bit for bit); the 3 dB below run 5 come from stage 2 on another CPU (docs/demo_model.md)."""
    from safetensors.torch import load_file
    from tqdm.auto import tqdm

    from ..vae.loader import load_vae

    done = os.path.join(out, DECODER_DONE)
    if os.path.exists(done) or cfg.decoder_steps <= 0:
        return
    path = os.path.join(out, "vae.safetensors")
    ckpt = os.path.join(out, "vae_decoder_ckpt.pt")
    model = load_vae(path, dtype=torch.float32).model
    conv1 = {k: v.clone() for k, v in model.conv1.state_dict().items()}
    latent_map = None
    if os.path.exists(os.path.join(out, LATENT_MAP)):
        latent_map = load_file(os.path.join(out, LATENT_MAP))
        inverse = torch.linalg.inv(latent_map["a"])
        _fold_latent_map_(model, inverse, -inverse @ latent_map["b"])
    model.requires_grad_(False)
    params = list(model.decoder.parameters()) + list(model.conv2.parameters())
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=cfg.decoder_lr, weight_decay=0.0)
    object_weight = decoder_object_weight(cfg)
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    t0 = time.time()
    model.train()
    with autograd_safe_vae():
        bar = tqdm(total=cfg.decoder_steps, initial=start, desc="vae decoder", dynamic_ncols=True)
        mse = None  # as in stage_vae: a checkpoint at the last step leaves nothing to train
        for step in range(start, cfg.decoder_steps):
            rng = random.Random((cfg.seed + 5) * 1_000_003 + step)
            x = _vae_batch(rng, 2, (17,), cfg.vae_crop)
            for g in opt.param_groups:
                g["lr"] = _lr(step, cfg.decoder_steps, cfg.decoder_lr, warmup=50)
            loss, mse = _reconstruction_step(model, x, opt, params, cfg.vae_latent_noise, object_weight,
                                             5.0, train_encoder=False, gen=_noise_generator(cfg.seed + 6, step))
            _after_step(out, "vae_decoder", bar, step, cfg.decoder_steps, loss, mse, model, opt, ckpt)
        bar.close()
    model.eval()
    if latent_map is not None:
        _fold_latent_map_(model, latent_map["a"], latent_map["b"])
        model.conv1.load_state_dict(conv1)  # the encoder the DiT's latents came from, without rounding
    _save(model.state_dict(), path)
    # the summary goes through this file (merged by ``run``): the stage may run in a second process
    with open(done + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"steps": cfg.decoder_steps, "object_weight": object_weight,
                   "wall_s_last_run": round(time.time() - t0, 1), "final_mse": _final(mse)}, f)
    os.replace(done + ".tmp", done)


# ----------------------------------------------------------------------------------------- driver
def _decoder_worker(out: str, cfg: DemoTrainConfig) -> None:
    torch.set_num_threads(1)
    _run_stage(out, "vae_decoder", stage_vae_decoder, cfg)


def _run_stage(out: str, name: str, stage, cfg: DemoTrainConfig) -> None:
    s0 = time.time()
    stage(out, cfg)
    _log(out, stage=name, done=True, wall_s=round(time.time() - s0, 1))
    print(f"train-demo: stage {name} done ({time.time() - s0:.0f}s)", file=sys.stderr)


def run(out: str, cfg: DemoTrainConfig | None = None) -> dict:
    """Run (or resume) every stage into ``out``; returns the summary.

    With ``cfg.parallel`` the decoder fine-tune (stage 5, it needs only the VAE) runs in a second process,
    one thread, beside the DiT stage: the two longest stages then share a 2-core machine's wall time, and the
    DiT takes ``cfg.threads`` once the decoder is done. The caller's torch thread count is restored.
    """
    before = torch.get_num_threads()
    try:
        return _run(out, cfg or DemoTrainConfig())
    finally:  # the stages set the process's thread count; a caller's (a test session's, a node's) comes back
        torch.set_num_threads(before)


def _run(out: str, cfg: DemoTrainConfig) -> dict:
    import multiprocessing as mp

    torch.set_num_threads(cfg.threads)
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    _summary(out, config=asdict(cfg), command=" ".join(["python -m wan_core train-demo"] + sys.argv[2:]))
    for name, stage in (("text_encoder", stage_text_encoder), ("vae", stage_vae), ("latents", stage_latents)):
        _run_stage(out, name, stage, cfg)
    worker = None
    if cfg.parallel and cfg.decoder_steps > 0 and not os.path.exists(os.path.join(out, DECODER_DONE)):
        worker = mp.get_context("spawn").Process(target=_decoder_worker, args=(out, cfg), daemon=True)
        worker.start()
        torch.set_num_threads(1)  # the DiT stage now shares the machine with the decoder's process
    try:
        _run_stage(out, "dit", stage_dit, cfg)
        if worker is not None:
            worker.join()
            if worker.exitcode != 0:
                raise RuntimeError(f"train-demo: the VAE decoder stage failed (exit code {worker.exitcode}); "
                                   f"run the command again to resume it")
        else:
            _run_stage(out, "vae_decoder", stage_vae_decoder, cfg)
    finally:
        if worker is not None and worker.is_alive():  # interrupted: the decoder's checkpoint lets it resume
            worker.terminate()
            worker.join()
    done = os.path.join(out, DECODER_DONE)
    if os.path.exists(done):
        _summary(out, vae_decoder=json.load(open(done, encoding="utf-8")))
    return _summary(out, total_wall_s_last_run=round(time.time() - t0, 1))


def main(args) -> int:
    """``python -m wan_core train-demo``: flags left at None keep :class:`DemoTrainConfig`'s values."""
    d = DemoTrainConfig()
    recipe = args.vae_recipe
    phases = VAE_RECIPES[recipe] if recipe else d.vae_phases
    if args.vae_steps:  # the total, split across the phases in their proportions
        total = sum(p.steps for p in phases)
        phases = tuple(replace(p, steps=max(1, round(args.vae_steps * p.steps / total))) for p in phases)
    cfg = DemoTrainConfig(vae_phases=phases, dit_steps=args.dit_steps or d.dit_steps,
                          decoder_steps=args.decoder_steps or d.decoder_steps,
                          num_clips=args.clips or d.num_clips, threads=args.threads or d.threads,
                          dit_precision=args.precision or d.dit_precision,
                          dit_compile=d.dit_compile and not args.no_compile)
    summary = run(args.out, cfg)
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}, indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m wan_core.demo.train")
    add_arguments(ap)
    sys.exit(main(ap.parse_args()))
