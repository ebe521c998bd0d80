"""Tiny random-weight models for the ``tiny-random`` preset: the whole chain in seconds, output is noise.

Used by the CLI (``--preset tiny-random``) and tests, until a trained demo model exists. Everything is built
locally (a SentencePiece tokenizer is trained on a small built-in word list), nothing is downloaded.
"""
from __future__ import annotations

import io
import random

import torch

_WORDS = ("a the of in on with and through over under cat dog fox person woman man child camera pans zooms "
          "slowly quickly bright dark red blue green golden sky river ocean mountain forest city street night "
          "day rain snow light shadow walking running dancing flying video cinematic shot close-up wide "
          "realistic winter scenery nature trees daytime tracking sunset beautiful moving").split()


def tiny_tokenizer_bytes(vocab_size: int = 80, seed: int = 0) -> bytes:
    """A SentencePiece model with umT5's special ids (pad 0, EOS 1, unk 2, no BOS), trained on the spot."""
    import sentencepiece as spm

    rng = random.Random(seed)
    lines = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 15))) for _ in range(800)]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=buf, vocab_size=vocab_size, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0, minloglevel=2, num_threads=1,
    )
    return buf.getvalue()


def randomize_(module: torch.nn.Module) -> None:
    """Fill parameters in place: fan-in scaled normal weights, zero biases, unit norm gains."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("gamma"):
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, (p[0].numel() if p.dim() > 1 else 1) ** -0.5)


def random_vae_model(cfg=None, seed: int = 0) -> torch.nn.Module:
    """A Wan VAE model (default: the real 2.1 widths) with every tensor random: gains 1 + 0.1 N(0,1), other
    tensors N(0,1) / sqrt(fan_in). For benchmarks and memory probes, where outputs only need to be finite."""
    from .vae.config import WAN21_VAE
    from .vae.model import build_model

    model = build_model(cfg or WAN21_VAE, "cpu")  # uninitialised storage, filled below
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p[0].numel() if p.dim() > 1 else 1
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)
    return model.eval()


def tiny_random_models(seed: int = 0, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
    """(dit, vae, text_encoder) with random weights and matching widths (text dim 32)."""
    from .config import DIT_PRESETS, TEXT_ENCODER_PRESETS
    from .dit.model import WanDiT
    from .text.encoder import build_umt5, load_text_encoder
    from .vae.config import PRESETS as VAE_PRESETS
    from .vae.loader import load_vae
    from .vae.model import WanVAEModel

    te_cfg = TEXT_ENCODER_PRESETS["tiny"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        dit = WanDiT(DIT_PRESETS["tiny"].replace(text_dim=te_cfg.d_model)).to(device, dtype).eval()
        vae_model = WanVAEModel(VAE_PRESETS["tiny"])
        randomize_(vae_model)
        vae = load_vae(vae_model.state_dict(), dtype=dtype, device=device)
        umt5 = build_umt5(te_cfg, device="cpu")
        with torch.no_grad():
            for p in umt5.parameters():
                p.normal_(0, 0.5)
        te = load_text_encoder(umt5.state_dict(), tokenizer=tiny_tokenizer_bytes(), config=te_cfg,
                               device=device)
    return dit, vae, te
