"""The built-in demo model and the tiny random-weight models.

* ``builtin_paths()`` / ``load_demo_models()`` / ``DEMO_DEFAULTS``: a small Wan 2.1 model (DiT, VAE, umT5)
  trained here on synthetic captioned videos ("a red circle moving left"), shipped in ``weights/`` and read
  by the public loaders like any checkpoint (docs/demo_model.md). ``data``, ``score`` and ``train`` hold the
  data generator, the prompt-following detector and the training command.
* ``tiny_random_models()`` etc.: random weights for the ``tiny-random`` preset (the whole chain in seconds,
  output is noise). Everything is built locally, nothing is downloaded.
"""
from __future__ import annotations

import io
import random
from pathlib import Path

import torch

from .model import DEMO_DEFAULTS as DEMO_DEFAULTS, DemoDefaults as DemoDefaults  # re-exported

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
_FILES = {"dit": "dit.safetensors", "vae": "vae.safetensors", "text_encoder": "text_encoder.safetensors",
          "vace": "vace.safetensors"}
VACE_DEMO_NAME = "wancore-demo-vace"


def builtin_paths() -> dict[str, Path]:
    """``{"dit", "vae", "text_encoder", "vace"}`` -> the packaged demo files (the tokenizer is embedded in the text
    encoder file as ``spiece_model``; ``vace`` holds the VACE branch's tensors only, see ``load_demo_models`` and
    ``demo_vace_dit_file``). Raises ``FileNotFoundError`` naming the missing file."""
    paths = {k: WEIGHTS_DIR / v for k, v in _FILES.items()}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"the built-in demo model is missing {', '.join(missing)}; reinstall the package "
                                f"or train it with: python -m wan_core train-demo --out DIR")
    return paths


def demo_dit_options(options: dict) -> dict:
    """``load_dit`` keywords for a demo DiT file: fp32 compute unless ``options`` choose a dtype or a weight
    format (the file is stored fp16, half the bytes, and CPUs compute fp16 slowly)."""
    return options if {"dtype", "weights"} & set(options) else {**options, "dtype": torch.float32}


def load_demo_models(device: torch.device | str = "cpu", vace: bool = False, **dit_options):
    """(dit, vae, text_encoder) of the built-in demo model through the public loaders (float32).
    ``vace``: the DiT with its VACE branch (docs/demo_model.md, "The VACE branch"; forward with ``vace_context``).
    ``dit_options``: ``load_dit`` keywords (attention, skiparse, weights, gemm, ...)."""
    from ..dit.loader import load_dit
    from ..text.encoder import load_text_encoder
    from ..vae.loader import load_vae
    from .vace_branch import load_vace_branch

    paths = builtin_paths()
    if vace:
        dit = load_vace_branch(paths["dit"], paths["vace"], device=device, **demo_dit_options(dit_options))
    else:
        dit = load_dit(paths["dit"], device=device, **demo_dit_options(dit_options))
    vae = load_vae(paths["vae"], dtype=torch.float32, device=device)
    te = load_text_encoder(paths["text_encoder"], dtype=torch.float32, device=device)
    return dit, vae, te


def demo_vace_dit_file(folder: str | Path | None = None) -> Path:
    """One DiT file of the demo VACE model (the demo DiT's tensors and the VACE branch's, fp16, the demo header),
    for the places that take a file (a loader list, ``--dit``): written once into ``folder`` (default
    ``$XDG_CACHE_HOME/wancore`` or ``~/.cache/wancore``) and again when a packaged file is newer. ``load_dit``
    reads it as any VACE checkpoint (3 VACE blocks on 6: every 2nd block hinted)."""
    import os

    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    paths = builtin_paths()
    base = Path(folder) if folder is not None else Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wancore"
    out = base / f"{VACE_DEMO_NAME}.safetensors"
    newest = max(paths["dit"].stat().st_mtime, paths["vace"].stat().st_mtime)
    if out.is_file() and out.stat().st_mtime >= newest:
        return out
    with safe_open(str(paths["dit"]), "pt") as f:
        metadata = f.metadata()
    base.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    save_file({**load_file(str(paths["dit"])), **load_file(str(paths["vace"]))}, str(tmp), metadata=metadata)
    os.replace(tmp, out)
    return out


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
    from ..vae.config import WAN21_VAE
    from ..vae.model import build_model

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
    from ..config import DIT_PRESETS, TEXT_ENCODER_PRESETS
    from ..dit.model import WanDiT
    from ..text.encoder import build_umt5, load_text_encoder
    from ..vae.config import PRESETS as VAE_PRESETS
    from ..vae.loader import load_vae
    from ..vae.model import WanVAEModel

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
