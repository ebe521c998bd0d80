"""The demo model's configurations (data) and its recommended generation settings.

The three networks are the Wan 2.1 architectures at small widths: a 6-layer DiT (head_dim 128 as released),
a Wan VAE with the same 8x spatial / 4x temporal compression and 16 latent channels, and a 2-layer umT5.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import DiTConfig, TextEncoderConfig
from ..vae.config import VAEConfig
from ..variants import VARIANTS

DEMO_TEXT_ENCODER = TextEncoderConfig(vocab_size=32, d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=2,
                                      name="wancore-demo")
DEMO_VAE = VAEConfig(base_dim=12, z_dim=16, dim_mult=(1, 2, 2, 4), num_res_blocks=1,
                     temporal_downsample=(False, True, True), name="wancore-demo")
# text_len 32 instead of Wan's 512: captions are <= 12 tokens, and the cross-attention keys over 512 padding
# rows would cost more than the whole video stream at this size. Stored in the file header (``wan_text_len``).
# 6 blocks since run 12 (4 until then): on the block-PCA VAE's latents the 4-block DiT followed 83.8 % of 240
# held-out pairs, the 6-block one 88.8 % (docs/demo_model.md); on the reconstruction VAE's both 88.8 % (all
# before the training timestep shift, with which the 6-block DiT follows 99.6 %)
DEMO_DIT = DiTConfig(dim=256, ffn_dim=512, num_heads=2, num_layers=6, text_dim=DEMO_TEXT_ENCODER.d_model,
                     text_len=32, name="wancore-demo")


_TUNED = VARIANTS["wancore-demo"].sampling  # the variants table holds the values and why they were chosen


@dataclass(frozen=True)
class DemoDefaults:
    """Generation settings the demo model was tuned for (64x64, 17 frames: what it was trained on most)."""

    width: int = _TUNED.width
    height: int = _TUNED.height
    frames: int = _TUNED.frames
    steps: int = _TUNED.steps
    guidance: float = _TUNED.guidance
    shift: float = _TUNED.shift
    fps: int = _TUNED.fps
    solver: str = "unipc"
    negative_prompt: str = _TUNED.negative_prompt or ""


DEMO_DEFAULTS = DemoDefaults()
