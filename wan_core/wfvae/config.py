"""WF-VAE configuration: the two published structures (4x8x8, and Open-Sora Plan v1.5's 8x8x8), read from
a release's ``config.json`` or from the weights' shapes.

docs/wfvae.md section 2 lists the facts (official Open-Sora Plan ``WFVAEModel``).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

SCALE = 0.18215  # the official default per-channel scale (shift 0) when a release gives none
T_INTERPOLATIONS = ("trilinear", "nearest")


@dataclass(frozen=True)
class WFVAEConfig:
    """One WF-VAE layout. ``temporal_factor`` 4: level 1 of the energy flow is a per-frame 2-D Haar step
    (12 channels); 8: a 3-D Haar step that also halves time (24 channels). ``t_interpolation`` is the temporal
    mode of the decoder's level-2 upsampling (level 1 of the 8x8x8 structure is always trilinear)."""

    latent_dim: int = 16
    base_channels: int = 192
    encoder_num_resblocks: int = 2
    encoder_energy_flow: int = 128
    decoder_num_resblocks: int = 2
    decoder_energy_flow: int = 128
    connect_res_layer_num: int = 1
    use_attention: bool = True
    temporal_factor: int = 4
    t_interpolation: str = "trilinear"
    scale: tuple[float, ...] = ()
    shift: tuple[float, ...] = ()
    name: str = "wfvae"

    spatial_factor = 8
    in_channels = 3

    def __post_init__(self) -> None:
        if self.temporal_factor not in (4, 8):
            raise ValueError(f"WF-VAE temporal_factor must be 4 or 8, got {self.temporal_factor}")
        if self.t_interpolation not in T_INTERPOLATIONS:
            raise ValueError(f"WF-VAE t_interpolation must be one of {T_INTERPOLATIONS}, got {self.t_interpolation!r}")
        for what in ("scale", "shift"):
            values = getattr(self, what)
            if values and len(values) != self.latent_dim:
                raise ValueError(f"WF-VAE {what} has {len(values)} values, expected one per latent channel "
                                 f"({self.latent_dim})")

    @property
    def l1_channels(self) -> int:
        """Channels of the level-1 wavelet coefficients: 4 (2-D) or 8 (3-D) subbands of RGB."""
        return 12 if self.temporal_factor == 4 else 24

    @property
    def z_dim(self) -> int:
        """The latent channels under the Wan VAE config's name (``check_latent``, ``latent_geometry`` read it)."""
        return self.latent_dim

    @property
    def latent_scale(self) -> tuple[float, ...]:
        return self.scale or (SCALE,) * self.latent_dim

    @property
    def latent_shift(self) -> tuple[float, ...]:
        return self.shift or (0.0,) * self.latent_dim

    def latent_frames(self, frames: int) -> int:
        return 1 + (frames - 1) // self.temporal_factor

    def video_frames(self, latent_frames: int) -> int:
        return 1 + self.temporal_factor * (latent_frames - 1)


# Published releases (docs/wfvae.md section 1); widths not stated in a release come from its weights.
WFVAE_L16 = WFVAEConfig(name="WF-VAE-L 16ch 4x8x8")
OSP13_WFVAE = WFVAEConfig(latent_dim=8, base_channels=128, name="Open-Sora Plan v1.3 WF-VAE 4x8x8")
OSP15_WFVAE = WFVAEConfig(latent_dim=32, base_channels=160, temporal_factor=8,
                          name="Open-Sora Plan v1.5 WF-VAE 8x8x8")
TINY_WFVAE = WFVAEConfig(latent_dim=4, base_channels=8, encoder_num_resblocks=1, encoder_energy_flow=8,
                         decoder_num_resblocks=1, decoder_energy_flow=8, name="tiny WF-VAE 4x8x8")
TINY_WFVAE_888 = replace(TINY_WFVAE, temporal_factor=8, name="tiny WF-VAE 8x8x8")

# the official config.json names of the fields read here
_JSON_FIELDS = {"latent_dim": "latent_dim", "base_channels": "base_channels",
                "encoder_num_resblocks": "encoder_num_resblocks",
                "encoder_energy_flow": "encoder_energy_flow_hidden_size",
                "decoder_num_resblocks": "decoder_num_resblocks",
                "decoder_energy_flow": "decoder_energy_flow_hidden_size",
                "connect_res_layer_num": "connect_res_layer_num", "use_attention": "use_attention",
                "t_interpolation": "t_interpolation"}


def _count(shapes: Mapping[str, tuple[int, ...]], pattern: str) -> int:
    """How many distinct indices ``(\\d+)`` in ``pattern`` the keys hold."""
    rx = re.compile(pattern)
    return len({m.group(1) for k in shapes if (m := rx.fullmatch(k))})


def _shape(shapes: Mapping[str, tuple[int, ...]], key: str, source: str) -> tuple[int, ...]:
    if key not in shapes:
        raise ValueError(f"{source}: not a complete WF-VAE checkpoint: {key!r} is missing")
    return shapes[key]


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], source: str = "<state dict>",
                       release: Mapping | None = None) -> WFVAEConfig:
    """The layout of a WF-VAE from its (official) parameter names and shapes; ``release`` (a ``config.json``)
    supplies what the weights cannot tell: ``t_interpolation``, ``scale`` and ``shift``."""
    if any(k.endswith(".norm1.weight") for k in shapes):
        raise ValueError(f"{source}: a WF-VAE with GroupNorm (norm_type='groupnorm'); every published WF-VAE uses "
                         f"LayerNorm and only that is supported (its causal streaming is exact)")
    l1 = _shape(shapes, "encoder.connect_l1.weight", source)
    if l1[1] not in (12, 24):
        raise ValueError(f"{source}: encoder.connect_l1 takes {l1[1]} channels; a WF-VAE has 12 (4x8x8) or 24 (8x8x8)")
    n_connect = _count(shapes, r"decoder\.connect_l1\.(\d+)\.conv1\.conv\.weight")
    fields = dict(
        latent_dim=_shape(shapes, "encoder.conv_out.conv.weight", source)[0] // 2,
        base_channels=_shape(shapes, "encoder.down1.0.weight", source)[0],
        encoder_num_resblocks=_count(shapes, r"encoder\.down1\.(\d+)\.conv1\.weight"),
        encoder_energy_flow=l1[0],
        decoder_num_resblocks=_count(shapes, r"decoder\.up2\.(\d+)\.conv1\.conv\.weight") - 1,
        decoder_energy_flow=_shape(shapes, f"decoder.connect_l1.{n_connect}.weight", source)[1],
        connect_res_layer_num=n_connect,
        use_attention="encoder.mid.1.q.conv.weight" in shapes,
        temporal_factor=4 if l1[1] == 12 else 8,
    )
    release = release or {}
    extra = {k: release[v] for k, v in _JSON_FIELDS.items() if k == "t_interpolation" and v in release}
    for what in ("scale", "shift"):
        if what in release:
            extra[what] = tuple(float(v) for v in release[what])
    cfg = WFVAEConfig(**fields, **extra, name=f"WF-VAE {fields['temporal_factor']}x8x8 "  # type: ignore[arg-type]
                      f"latent {fields['latent_dim']} base {fields['base_channels']}")
    stated = {k: release[v] for k, v in _JSON_FIELDS.items() if v in release and k != "t_interpolation"}
    clash = [f"{k}={v!r} (weights: {getattr(cfg, k)!r})" for k, v in stated.items() if getattr(cfg, k) != v]
    if clash:
        raise ValueError(f"{source}: its config.json does not match its weights: {', '.join(clash)}")
    return cfg


def release_json(cfg: WFVAEConfig) -> dict:
    """``cfg`` as an official ``config.json`` (``WFVAEModel`` keyword arguments)."""
    out: dict = {"_class_name": "WFVAEModel", "norm_type": "layernorm", "dropout": 0.0}
    out.update({v: getattr(cfg, k) for k, v in _JSON_FIELDS.items()})
    out["scale"], out["shift"] = list(cfg.latent_scale), list(cfg.latent_shift)
    three_d = cfg.temporal_factor == 8
    out.update(l1_dowmsample_block="Spatial2xTime2x3DDownsample" if three_d else "Downsample",
               l1_downsample_wavelet="HaarWaveletTransform3D" if three_d else "HaarWaveletTransform2D",
               l1_upsample_block="Spatial2xTime2x3DUpsample" if three_d else "Upsample",
               l1_upsample_wavelet="InverseHaarWaveletTransform3D" if three_d else "InverseHaarWaveletTransform2D",
               l2_dowmsample_block="Spatial2xTime2x3DDownsample", l2_downsample_wavelet="HaarWaveletTransform3D",
               l2_upsample_block="Spatial2xTime2x3DUpsample", l2_upsample_wavelet="InverseHaarWaveletTransform3D")
    return out
