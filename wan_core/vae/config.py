"""VAE configuration: the Wan 2.1 and 2.2 presets, small test presets, and detection from a state dict.

Implements docs/wan_spec.md sections 1.2 and 3.3 (layer layout) as data; ``model.py`` builds from it.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..checkpoint import CheckpointError


@dataclass(frozen=True)
class VAEConfig:
    """Shape parameters of the Wan 2.1 video VAE (official ``WanVAE_`` arguments).

    Encoder widths are ``base_dim * [1] + dim_mult``; decoder widths ``decoder_base_dim * [dim_mult[-1]] +
    reversed(dim_mult)``. ``temporal_downsample[i]`` says whether encoder stage ``i`` halves time (the decoder
    uses the reverse list). Compression: ``2 ** (len(dim_mult) - 1)`` in space, ``2 ** sum(temporal_downsample)``
    in time.
    """

    base_dim: int = 96
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temporal_downsample: tuple[bool, ...] = (False, True, True)
    decoder_base_dim: int | None = None  # None: same as base_dim (Wan 2.1)
    in_channels: int = 3
    out_channels: int = 3
    # Wan 2.2 (docs/wan22.md section 3): pixels are patchified p x p into channels before the encoder and after
    # the decoder, and each stage adds a parameter-free shortcut (``residual.py``)
    patch_size: int = 1
    residual: bool = False
    name: str = field(default="custom", compare=False)

    def __post_init__(self):
        object.__setattr__(self, "dim_mult", tuple(int(m) for m in self.dim_mult))
        object.__setattr__(self, "temporal_downsample", tuple(bool(t) for t in self.temporal_downsample))
        if len(self.temporal_downsample) != len(self.dim_mult) - 1:
            raise ValueError(
                f"temporal_downsample needs {len(self.dim_mult) - 1} entries (one per downsampling stage), "
                f"got {len(self.temporal_downsample)}"
            )
        if self.decoder_base_dim is None:
            object.__setattr__(self, "decoder_base_dim", self.base_dim)

    @property
    def spatial_factor(self) -> int:
        return 2 ** (len(self.dim_mult) - 1) * self.patch_size

    @property
    def temporal_factor(self) -> int:
        return 2 ** sum(self.temporal_downsample)

    @property
    def temporal_upsample(self) -> tuple[bool, ...]:
        return tuple(reversed(self.temporal_downsample))

    @property
    def encoder_dims(self) -> list[int]:
        return [self.base_dim * m for m in (1,) + self.dim_mult]

    @property
    def decoder_dims(self) -> list[int]:
        base = self.base_dim if self.decoder_base_dim is None else self.decoder_base_dim  # set by __post_init__
        return [base * m for m in (self.dim_mult[-1],) + tuple(reversed(self.dim_mult))]

    def latent_frames(self, frames: int) -> int:
        """Latent frames for ``frames`` video frames (``frames`` = k * temporal_factor + 1)."""
        return 1 + (frames - 1) // self.temporal_factor

    def video_frames(self, latent_frames: int) -> int:
        return 1 + (latent_frames - 1) * self.temporal_factor


WAN21_VAE = VAEConfig(name="wan2.1")
"""The released Wan 2.1 VAE (``Wan2.1_VAE.pth``): 126,892,531 parameters, 194 tensors."""

TINY_VAE = VAEConfig(base_dim=8, z_dim=16, dim_mult=(1, 2, 4, 4), num_res_blocks=2, name="tiny")
"""Same layout and compression as Wan 2.1 at 1/12 of the width (for tests)."""

TINY_VAE_1RES = VAEConfig(base_dim=8, z_dim=4, dim_mult=(1, 2, 2, 2), num_res_blocks=1, name="tiny-1res")
"""One residual block per stage and 4 latent channels (exercises the index rules for other depths)."""

WAN22_VAE = VAEConfig(base_dim=160, decoder_base_dim=256, z_dim=48, patch_size=2, residual=True, name="wan2.2")
"""The released Wan 2.2 VAE (``Wan2.2_VAE.pth``, Wan2.2 wan/modules/vae2_2.py lines 863-873 and 888-899):
704,688,668 parameters, 196 tensors; 4 x 16 x 16 compression to 48 channels."""

TINY_VAE22 = VAEConfig(base_dim=8, decoder_base_dim=12, z_dim=48, patch_size=2, residual=True, name="tiny-2.2")
"""Wan 2.2 layout and compression (48 channels) at 1/20 of the width (for tests)."""

PRESETS = {c.name: c for c in (WAN21_VAE, TINY_VAE, TINY_VAE_1RES, WAN22_VAE, TINY_VAE22)}


def _index_groups(keys, prefix: str) -> dict[int, set[str]]:
    """``{i: {suffixes}}`` for keys ``<prefix>.<i>.<suffix>``."""
    pat = re.compile(re.escape(prefix) + r"\.(\d+)\.(.+)$")
    groups: dict[int, set[str]] = {}
    for k in keys:
        m = pat.match(k)
        if m:
            groups.setdefault(int(m.group(1)), set()).add(m.group(2))
    return groups


def _detect_wan22(shapes: Mapping[str, tuple[int, ...]], source: str, z_dim: int, base_dim: int, in_channels: int,
                  out_channels: int) -> VAEConfig:
    """The Wan 2.2 layout: ``encoder.downsamples.<stage>.downsamples.<j>`` (docs/wan22.md section 3)."""
    stages = sorted(_index_groups(shapes, "encoder.downsamples"))
    if stages != list(range(len(stages))):
        raise CheckpointError(f"{source}: not a Wan 2.2 VAE: encoder.downsamples.* has gaps ({stages})")
    dim_mult, temporal, blocks = [], [], set()
    for i in stages:
        layers = _index_groups(shapes, f"encoder.downsamples.{i}.downsamples")
        res = [j for j, suffixes in layers.items() if "residual.2.weight" in suffixes]
        blocks.add(len(res))
        width = shapes[f"encoder.downsamples.{i}.downsamples.{max(res)}.residual.2.weight"][0] if res else 0
        if not res or width % base_dim:
            raise CheckpointError(f"{source}: not a Wan 2.2 VAE: encoder stage {i} has no residual block of a "
                                  f"width that is a multiple of {base_dim}")
        dim_mult.append(width // base_dim)
        down = layers.get(len(res), set())
        if i < len(stages) - 1:
            temporal.append("time_conv.weight" in down)
    if len(blocks) != 1:
        raise CheckpointError(f"{source}: unequal residual blocks per encoder stage")
    patch = int(round((in_channels / 3) ** 0.5))
    if 3 * patch * patch != in_channels or out_channels != in_channels:
        raise CheckpointError(f"{source}: Wan 2.2 VAE with {in_channels} input / {out_channels} output channels; "
                              f"expected 3 x p x p (12 for the released VAE)")
    dec_width = shape_of(shapes, "decoder.head.0.gamma", source)[0]
    cfg = VAEConfig(base_dim=base_dim, z_dim=z_dim, dim_mult=tuple(dim_mult), num_res_blocks=blocks.pop(),
                    temporal_downsample=tuple(temporal), decoder_base_dim=dec_width // dim_mult[0],
                    patch_size=patch, residual=True)
    return next((preset for preset in PRESETS.values() if preset == cfg), cfg)


def shape_of(shapes: Mapping[str, tuple[int, ...]], key: str, source: str) -> tuple[int, ...]:
    if key not in shapes:
        raise CheckpointError(f"{source}: not a Wan VAE: tensor {key!r} is missing")
    return tuple(shapes[key])


def detect_vae_config(shapes: Mapping[str, tuple[int, ...]], source: str = "<state dict>") -> VAEConfig:
    """Infer a :class:`VAEConfig` from official-named tensor shapes (``{key: shape}``).

    Both layouts: Wan 2.1 (``encoder.downsamples.<i>`` flat) and Wan 2.2 (stages with their own ``downsamples``).
    Raises :class:`CheckpointError` naming what is missing or unsupported.
    """
    def shape(key: str) -> tuple[int, ...]:
        if key not in shapes:
            raise CheckpointError(f"{source}: not a Wan 2.1 VAE: tensor {key!r} is missing")
        return tuple(shapes[key])

    z_dim = shape("conv2.weight")[0]
    base_dim, in_channels = shape("encoder.conv1.weight")[:2]
    if any(k.startswith("encoder.downsamples.0.downsamples.") for k in shapes):
        return _detect_wan22(shapes, source, z_dim, base_dim, in_channels, shape("decoder.head.2.weight")[0])
    out_channels = shape("decoder.head.2.weight")[0]

    groups = _index_groups(shapes, "encoder.downsamples")
    if not groups or sorted(groups) != list(range(len(groups))):
        raise CheckpointError(f"{source}: not a Wan 2.1 VAE: encoder.downsamples.* is missing or has gaps")
    stages: list[list[int]] = [[]]  # residual out-widths per stage
    temporal: list[bool] = []
    for i in sorted(groups):
        suffixes = groups[i]
        if "residual.2.weight" in suffixes:
            stages[-1].append(shapes[f"encoder.downsamples.{i}.residual.2.weight"][0])
        elif "resample.1.weight" in suffixes:
            temporal.append("time_conv.weight" in suffixes)
            stages.append([])
        elif any(s.startswith(("norm.", "to_qkv.")) for s in suffixes):
            raise CheckpointError(f"{source}: VAE with attention inside the encoder stages is not supported "
                                  f"(Wan 2.1 has attention only in the middle blocks)")
        else:
            raise CheckpointError(f"{source}: unrecognised encoder layer encoder.downsamples.{i} "
                                  f"({', '.join(sorted(suffixes))})")
    counts = {len(s) for s in stages}
    if len(counts) != 1 or 0 in counts:
        raise CheckpointError(f"{source}: unequal residual blocks per encoder stage ({[len(s) for s in stages]})")
    dim_mult = []
    for s in stages:
        if s[-1] % base_dim:
            raise CheckpointError(f"{source}: encoder width {s[-1]} is not a multiple of the base width {base_dim}")
        dim_mult.append(s[-1] // base_dim)
    dec_width = shape("decoder.head.0.gamma")[0]
    if dec_width % dim_mult[0]:
        raise CheckpointError(f"{source}: decoder output width {dec_width} does not fit dim_mult {dim_mult}")
    cfg = VAEConfig(
        base_dim=base_dim, z_dim=z_dim, dim_mult=tuple(dim_mult), num_res_blocks=counts.pop(),
        temporal_downsample=tuple(temporal), decoder_base_dim=dec_width // dim_mult[0],
        in_channels=in_channels, out_channels=out_channels,
    )
    for preset in PRESETS.values():
        if preset == cfg:
            return preset
    return cfg
