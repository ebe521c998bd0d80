"""Model configurations as data: the Wan 2.1 DiT and umT5 text encoder (docs/wan_spec.md sections 1.1 and 1.3).

Presets name the released models; ``tiny-*`` presets exist for tests and the random-weights demo.
``detect_dit_config`` derives a config from a state dict's shapes, as ComfyUI does (docs/wan_spec.md section 1.1).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DiTConfig:
    """Wan DiT hyper-parameters (official ``WanModel`` names)."""

    dim: int = 1536
    ffn_dim: int = 8960
    num_heads: int = 12
    num_layers: int = 30
    freq_dim: int = 256
    text_dim: int = 4096
    text_len: int = 512
    in_dim: int = 16
    out_dim: int = 16
    patch_size: tuple[int, int, int] = (1, 2, 2)
    qk_norm: bool = True
    cross_attn_norm: bool = True
    eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_max_len: int = 1024
    # Wan 2.1 I2V / FLF2V (docs/i2v.md section 2): CLIP width of ``img_emb`` (1280; 0 = no image cross-attention)
    # and the FLF2V position embedding's token count (``img_emb.emb_pos``: 514; 0 = none)
    image_dim: int = 0
    image_pos_len: int = 0
    # Wan VACE (docs/vace.md section 1): the main blocks that receive a VACE hint, in order, one VACE block each
    # (() = no VACE branch; not stored in the weights: inferred as range(0, num_layers, num_layers // n_vace)),
    # and the VACE context's channel count (``vace_patch_embedding`` input: 96 = 16 + 16 latents + 64 mask)
    vace_layers: tuple[int, ...] = ()
    vace_in_dim: int = 0
    name: str = "custom"

    def __post_init__(self):
        object.__setattr__(self, "vace_layers", tuple(int(i) for i in self.vace_layers))
        self._check_vace()
        if self.dim % self.num_heads:
            raise ValueError(f"DiTConfig: dim {self.dim} is not divisible by num_heads {self.num_heads}")
        if self.head_dim % 2:
            raise ValueError(f"DiTConfig: head_dim {self.head_dim} must be even for RoPE")
        if self.freq_dim % 2:
            raise ValueError(f"DiTConfig: freq_dim {self.freq_dim} must be even")

    def _check_vace(self) -> None:
        v = self.vace_layers
        if v and (v[0] != 0 or list(v) != sorted(set(v)) or v[-1] >= self.num_layers):
            raise ValueError(f"DiTConfig: vace_layers {list(v)} must start at block 0 and increase within the "
                             f"{self.num_layers} blocks")
        if bool(v) != (self.vace_in_dim > 0):
            raise ValueError(f"DiTConfig: vace_layers {list(v)} and vace_in_dim {self.vace_in_dim} must be given "
                             f"together (both empty / 0 for a model without VACE blocks)")

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def rope_dims(self) -> tuple[int, int, int]:
        """Head-dim split between the (frame, height, width) axes: 44/42/42 for d = 128
        (docs/wan_spec.md section 2.5)."""
        d = self.head_dim
        return d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6)

    def replace(self, **changes) -> "DiTConfig":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class TextEncoderConfig:
    """umT5 encoder hyper-parameters (transformers ``UMT5Config`` names)."""

    vocab_size: int = 256384
    d_model: int = 4096
    d_kv: int = 64
    num_heads: int = 64
    d_ff: int = 10240
    num_layers: int = 24
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    text_len: int = 512
    pad_token_id: int = 0
    eos_token_id: int = 1
    name: str = "custom"

    def replace(self, **changes) -> "TextEncoderConfig":
        return dataclasses.replace(self, **changes)


DIT_PRESETS: dict[str, DiTConfig] = {
    "wan2.1-t2v-1.3b": DiTConfig(name="wan2.1-t2v-1.3b"),
    "wan2.1-t2v-14b": DiTConfig(dim=5120, ffn_dim=13824, num_heads=40, num_layers=40, name="wan2.1-t2v-14b"),
    # I2V-14B (480P and 720P share the shapes) and FLF2V-14B: Wan2.1 wan/configs/wan_i2v_14B.py lines 28-32,
    # wan/configs/__init__.py line 15 (flf2v = i2v); in_dim 36 = 16 noise + 4 mask + 16 conditioning latent
    # (wan/modules/model.py line 530 concatenates y after x)
    "wan2.1-i2v-14b": DiTConfig(dim=5120, ffn_dim=13824, num_heads=40, num_layers=40, in_dim=36, image_dim=1280,
                                name="wan2.1-i2v-14b"),
    "wan2.1-flf2v-14b": DiTConfig(dim=5120, ffn_dim=13824, num_heads=40, num_layers=40, in_dim=36, image_dim=1280,
                                  image_pos_len=514, name="wan2.1-flf2v-14b"),
    # Wan 2.2 TI2V-5B: Wan2.2 wan/configs/wan_ti2v_5B.py lines 20-29 (48 latent channels of the Wan 2.2 VAE).
    "wan2.2-ti2v-5b": DiTConfig(dim=3072, ffn_dim=14336, num_heads=24, num_layers=30, in_dim=48, out_dim=48,
                                name="wan2.2-ti2v-5b"),
    # Wan 2.2 T2V-A14B: two experts, each shaped as the 2.1 14B (Wan2.2 wan/configs/wan_t2v_A14B.py lines 20-29)
    "wan2.2-t2v-a14b": DiTConfig(dim=5120, ffn_dim=13824, num_heads=40, num_layers=40, name="wan2.2-t2v-a14b"),
    # Wan 2.2 I2V-A14B: the experts take the Wan 2.1 I2V's 36 input channels without its CLIP image embedding
    # (Wan2.2 wan/configs/wan_i2v_A14B.py; no img_emb in the released files)
    "wan2.2-i2v-a14b": DiTConfig(dim=5120, ffn_dim=13824, num_heads=40, num_layers=40, in_dim=36,
                                 name="wan2.2-i2v-a14b"),
    # Wan 2.1 VACE: the T2V DiTs plus VACE blocks (Wan2.1 wan/configs/__init__.py lines 26-27: vace-1.3B / 14B use
    # the t2v configs); the hinted blocks and the 96 context channels come from the released checkpoints'
    # config.json (VaceWanModel.from_pretrained, wan/vace.py line 95): every 2nd of 30 blocks (1.3B), every 5th
    # of 40 (14B); docs/vace.md section 1
    "wan2.1-vace-1.3b": DiTConfig(vace_layers=tuple(range(0, 30, 2)), vace_in_dim=96, name="wan2.1-vace-1.3b"),
    "wan2.1-vace-14b": DiTConfig(dim=5120, ffn_dim=13824, num_heads=40, num_layers=40,
                                 vace_layers=tuple(range(0, 40, 5)), vace_in_dim=96, name="wan2.1-vace-14b"),
    # Small configs for tests and the random-weights demo; real head_dim 128 is kept in "tiny-wide".
    "tiny": DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, name="tiny"),
    "tiny-4h": DiTConfig(dim=96, ffn_dim=160, num_heads=4, num_layers=3, text_dim=48, name="tiny-4h"),
    "tiny-wide": DiTConfig(dim=256, ffn_dim=512, num_heads=2, num_layers=2, text_dim=64, name="tiny-wide"),
}

TEXT_ENCODER_PRESETS: dict[str, TextEncoderConfig] = {
    "umt5-xxl": TextEncoderConfig(name="umt5-xxl"),
    "tiny": TextEncoderConfig(vocab_size=512, d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2,
                              name="tiny"),
}


def dit_preset(name: str) -> DiTConfig:
    try:
        return DIT_PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown DiT preset {name!r}; known: {', '.join(DIT_PRESETS)}") from None


_BLOCK_RE = re.compile(r"^blocks\.(\d+)\.")
_VACE_RE = re.compile(r"^vace_blocks\.(\d+)\.")


def detect_dit_config(
    shapes: Mapping[str, tuple[int, ...]], text_len: int = 512, num_heads: int | None = None,
    vace_layers: Sequence[int] | None = None,
) -> DiTConfig:
    """Derive the DiT config from official-named parameter shapes (docs/wan_spec.md section 1.1).

    ``shapes``: key -> shape (a LazyStateDict's shapes or ``{k: v.shape}``). head_dim is 128 in every
    released Wan model; smaller widths (tests) fall back to the largest head count whose head_dim is even
    and matches the ``norm_q`` width, so pass an explicit config for unusual head counts. ``vace_layers``: the
    hinted blocks of a VACE model when known (a diffusers config.json records them), else inferred.
    """
    if hasattr(shapes, "shape") and not isinstance(shapes, dict):  # a LazyStateDict
        shapes = {k: shapes.shape(k) for k in shapes}
    required = ("head.modulation", "head.head.weight", "patch_embedding.weight", "text_embedding.0.weight",
                "time_embedding.0.weight", "blocks.0.ffn.0.weight")
    missing = [k for k in required if k not in shapes]
    if missing:
        raise KeyError(f"cannot detect a Wan DiT config: missing {', '.join(missing)}")
    dim = int(shapes["head.modulation"][-1])
    patch = tuple(int(s) for s in shapes["patch_embedding.weight"][2:])
    out_dim = int(shapes["head.head.weight"][0]) // (patch[0] * patch[1] * patch[2])
    layers = {int(m.group(1)) for k in shapes if (m := _BLOCK_RE.match(k))}
    num_layers = max(layers) + 1 if layers else 0
    if layers != set(range(num_layers)):
        absent = sorted(set(range(num_layers)) - layers)
        raise KeyError(f"blocks are not numbered 0..{num_layers - 1}: missing {absent[:5]}")
    if num_heads is None:
        num_heads = dim // 128 if dim % 128 == 0 else _guess_heads(dim)
    hinted = _vace_layers(shapes, num_layers, vace_layers)
    return DiTConfig(
        dim=dim,
        ffn_dim=int(shapes["blocks.0.ffn.0.weight"][0]),
        num_heads=num_heads,
        num_layers=num_layers,
        freq_dim=int(shapes["time_embedding.0.weight"][1]),
        text_dim=int(shapes["text_embedding.0.weight"][1]),
        text_len=text_len,
        in_dim=int(shapes["patch_embedding.weight"][1]),
        out_dim=out_dim,
        patch_size=patch,  # type: ignore[arg-type]
        qk_norm="blocks.0.self_attn.norm_q.weight" in shapes,
        cross_attn_norm="blocks.0.norm3.weight" in shapes,
        image_dim=int(shapes["img_emb.proj.1.weight"][1]) if "img_emb.proj.1.weight" in shapes else 0,
        image_pos_len=int(shapes["img_emb.emb_pos"][1]) if "img_emb.emb_pos" in shapes else 0,
        vace_layers=hinted,
        vace_in_dim=int(shapes["vace_patch_embedding.weight"][1]) if hinted else 0,
        name=_preset_name(dim, num_layers, int(shapes["patch_embedding.weight"][1]), "img_emb.proj.1.weight" in shapes,
                          "img_emb.emb_pos" in shapes, hinted),
    )


def _vace_layers(shapes: Mapping[str, tuple[int, ...]], num_layers: int,
                 given: Sequence[int] | None) -> tuple[int, ...]:
    """The hinted blocks of a VACE model (``()`` without ``vace_blocks``): ``given``, else
    ``range(0, num_layers, num_layers // n_vace)`` (released 1.3B: 15 on 30 blocks, 14B: 8 on 40; the weights do
    not store them, docs/vace.md section 1)."""
    found = {int(m.group(1)) for k in shapes if (m := _VACE_RE.match(k))}
    n = max(found) + 1 if found else 0
    if found != set(range(n)):
        raise KeyError(f"vace_blocks are not numbered 0..{n - 1}: missing {sorted(set(range(n)) - found)[:5]}")
    if n and "vace_patch_embedding.weight" not in shapes:
        raise KeyError("vace_blocks without vace_patch_embedding.weight")
    if not n:
        return ()
    if given is not None:
        if len(given) != n:
            raise KeyError(f"the config names {len(given)} VACE layers ({list(given)}) for {n} vace_blocks")
        return tuple(int(i) for i in given)
    step = num_layers // n if n <= num_layers else 0
    layers = tuple(range(0, num_layers, step)) if step else ()
    if len(layers) != n:
        raise KeyError(f"cannot infer which of the {num_layers} blocks the {n} vace_blocks feed (not every "
                       f"{step or '?'}th block); pass a DiTConfig with vace_layers")
    return layers


def _guess_heads(dim: int) -> int:
    # Test-size models only: the state dict does not store the head count; prefer head_dim 32, then 64, ...
    for hd in (32, 64, 16, 8, 4, 2):
        if dim % hd == 0:
            return dim // hd
    return 1


def _preset_name(dim: int, layers: int, in_dim: int = 16, image: bool = False, image_pos: bool = False,
                 vace_layers: tuple[int, ...] = ()) -> str:
    for name, cfg in DIT_PRESETS.items():
        if (cfg.dim, cfg.num_layers, cfg.in_dim, bool(cfg.image_dim), bool(cfg.image_pos_len), cfg.vace_layers) == (
                dim, layers, in_dim, image, image_pos, vace_layers):
            return name
    return "custom"


__all__ = ["DiTConfig", "TextEncoderConfig", "DIT_PRESETS", "TEXT_ENCODER_PRESETS", "dit_preset",
           "detect_dit_config"]
