"""The Wan video VAE network: encoder, decoder and the latent 1x1x1 convs ``conv1`` / ``conv2`` (Wan 2.1; Wan 2.2
with ``config.residual``: docs/wan22.md section 3, layers in residual.py).

Implements docs/wan_spec.md section 3.3 (layout, official parameter names) on top of blocks.py / resample.py.
Every forward takes ``state``: None = whole sequence (the full-sequence form of section 3.2), a TemporalState = one
time chunk of a stream (streaming.py drives it).
"""
from __future__ import annotations

from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from .blocks import AttentionBlock, ResidualBlock, RMSNorm, norm_silu_conv
from .causal_conv import CHANNELS_LAST, CausalConv3d, TemporalState, uses_onednn
from .config import VAEConfig
from .resample import Resample
from .residual import build_decoder_layers, build_encoder_layers, conv_in, patchify, unpatchify


def _middle(dim: int) -> nn.ModuleList:
    return nn.ModuleList([ResidualBlock(dim, dim), AttentionBlock(dim), ResidualBlock(dim, dim)])


def _head(dim: int, out: int) -> nn.ModuleList:
    return _Head([RMSNorm(dim), nn.SiLU(), CausalConv3d(dim, out, 3, padding=1)])


class _Head(nn.ModuleList):
    """``head``: [0 RMS norm, 1 SiLU, 2 causal conv] as one step.

    Streaming without autograd, the conv narrows the channels (decoder 96 -> 3, encoder 384 -> 32), so it
    carries partial sums of its taps (``CausalConv3d.stream_taps``) instead of two wide input frames: for the
    decoder that is 2 full-resolution frames less in memory for the whole call.
    """

    def forward(self, x: torch.Tensor, state: TemporalState | None = None) -> torch.Tensor:
        norm, conv = cast(RMSNorm, self[0]), cast(CausalConv3d, self[2])
        if state is None or conv.out_channels >= conv.in_channels or torch.is_grad_enabled():
            return norm_silu_conv(norm, conv, x, state)
        return conv.stream_taps(F.silu(norm(x), inplace=True), state)


def step_growth(step) -> int:
    """How many times more elements a decoder step may produce than it gets: 4 for a spatial x2 upsampling
    (its nearest-neighbour copy comes before the conv), 2 for a temporal one (``time_conv`` doubles the
    channels), their product for a module holding upsamplings (a Wan 2.2 stage); 1 otherwise."""
    fn = getattr(step, "__func__", None)
    if fn is Resample._space_upsample:
        return 4
    if fn is Resample._time_upsample:
        return 2
    growth = 1
    if isinstance(step, nn.Module):
        for m in step.modules():
            if isinstance(m, Resample) and m.mode.startswith("up"):
                growth *= 8 if m.mode == "upsample3d" else 4
    return growth


def run_steps(steps, x: torch.Tensor, state: TemporalState | None, piece_frames: int | None,
              piece_elements: int | None = None) -> torch.Tensor:
    """Apply ``steps`` in order. Streaming (``state`` given) with ``piece_frames``: whenever a chunk has grown
    to more frames than that (after a temporal upsampling; at the encoder input), the remaining steps run on
    pieces of ``piece_frames`` frames, earliest first. Every step is causal and carries its frames in
    ``state``, so this is the same computation on smaller chunks: the full-resolution layers then hold one
    frame (plus cached ones) at a time instead of four.

    ``piece_elements`` (the decoder): the size of ``piece_frames`` frames at full resolution in elements.
    A step then takes as many frames at once as keep its input, times ``step_growth``, within that size:
    the low-resolution layers run several frames per call instead of one, while the full-resolution layers,
    which set the peak, keep ``piece_frames`` (Wan 2.1 widths, 17x128x224 untiled: 300.3 -> 304.2 MiB, the
    lower levels' pieces in flight). Fewer, larger calls: each convolution call has a fixed cost (on CPU,
    oneDNN reorders the layer's weights on every call, ~4 ms for a 384-channel 3x3x3 conv), which weighs
    most on small tiles."""
    for i, step in enumerate(steps):
        if state is not None and piece_frames:
            n = piece_frames
            if piece_elements is not None and x.shape[2] > 1:
                per_frame = x[:, :, 0].numel() * step_growth(step)
                n = max(1, piece_elements // max(per_frame, 1))
            if x.shape[2] > n:
                outs = [run_steps(steps[i:], piece, state, piece_frames, piece_elements)
                        for piece in x.split(n, dim=2)]
                outs = [o for o in outs if o.shape[2]]  # a temporal downsampling may emit nothing for a piece
                return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
        x = step(x, state)
        if x.shape[2] == 0:
            return x
    return x


class Encoder(nn.Module):
    """``x`` [B, 3, T, H, W] -> [B, 2*z_dim, 1 + (T-1)/4, H/8, W/8] (mean and log-variance, before ``conv1``)."""

    def __init__(self, cfg: VAEConfig):
        super().__init__()
        dims = cfg.encoder_dims
        self.conv1 = CausalConv3d(cfg.in_channels, dims[0], 3, padding=1)
        layers: list[nn.Module] = []
        last = len(cfg.dim_mult) - 1
        for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:])):
            for _ in range(cfg.num_res_blocks):
                layers.append(ResidualBlock(in_dim, out_dim))
                in_dim = out_dim
            if i != last:
                layers.append(Resample(out_dim, "downsample3d" if cfg.temporal_downsample[i] else "downsample2d"))
        self.downsamples = nn.ModuleList(layers)
        self.middle = _middle(dims[-1])
        self.head = _head(dims[-1], 2 * cfg.z_dim)

    def steps(self) -> list[nn.Module]:
        return [self.conv1, *self.downsamples, *self.middle, self.head]

    def forward(self, x: torch.Tensor, state: TemporalState | None = None, piece_frames: int | None = None):
        return run_steps(self.steps(), x, state, piece_frames)


class Decoder(nn.Module):
    """``z`` [B, z_dim, T', H', W'] (after ``conv2``) -> [B, 3, 1 + 4(T'-1), 8H', 8W'] (not clamped)."""

    def __init__(self, cfg: VAEConfig):
        super().__init__()
        dims = cfg.decoder_dims
        self.conv1 = CausalConv3d(cfg.z_dim, dims[0], 3, padding=1)
        self.middle = _middle(dims[0])
        layers: list[nn.Module] = []
        last = len(cfg.dim_mult) - 1
        for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:])):
            if i > 0:
                in_dim //= 2  # every upsampling layer halves the width
            for _ in range(cfg.num_res_blocks + 1):
                layers.append(ResidualBlock(in_dim, out_dim))
                in_dim = out_dim
            if i != last:
                layers.append(Resample(out_dim, "upsample3d" if cfg.temporal_upsample[i] else "upsample2d"))
        self.upsamples = nn.ModuleList(layers)
        self.head = _head(dims[-1], cfg.out_channels)
        ups = [m for m in layers if isinstance(m, Resample)]
        if ups:
            ups[-1].channels_last = True

    def steps(self) -> list:
        ups = [s for m in self.upsamples for s in (m.steps() if isinstance(m, Resample) else [m])]
        return [self.conv1, *self.middle, *ups, self.head]

    def forward(self, x: torch.Tensor, state: TemporalState | None = None, piece_frames: int | None = None):
        """``piece_frames`` (streaming): frames per call at full resolution; lower levels take as many frames
        as fit in the same number of elements (``run_steps``)."""
        full = None if not piece_frames else piece_frames * self.frame_elements(x)
        return run_steps(self.steps(), x, state, piece_frames, full)

    def frame_elements(self, z: torch.Tensor) -> int:
        """Elements of one frame at the full-resolution level (the head's input) for decoder input ``z``."""
        up = 2 ** sum(1 for m in self.modules() if isinstance(m, Resample) and m.mode.startswith("up"))
        width = cast(CausalConv3d, self.head[2]).in_channels
        return z.shape[0] * width * z.shape[3] * up * z.shape[4] * up


class Encoder22(Encoder):
    """Wan 2.2 encoder (docs/wan22.md section 3): patchified ``x`` [B, 3*p*p, T, H, W] -> [B, 2*z_dim, T', H/8,
    W/8]; stages with parameter-free shortcuts (``residual.DownStage``), same middle and head as Wan 2.1."""

    def __init__(self, cfg: VAEConfig):
        nn.Module.__init__(self)
        dims = cfg.encoder_dims
        self.conv1 = conv_in(cfg, dims[0])
        self.downsamples = build_encoder_layers(cfg)
        self.middle = _middle(dims[-1])
        self.head = _head(dims[-1], 2 * cfg.z_dim)


class Decoder22(Decoder):
    """Wan 2.2 decoder: ``z`` [B, z_dim, T', H', W'] -> [B, 3*p*p, T, 8H', 8W'] (patchified, not clamped)."""

    def __init__(self, cfg: VAEConfig):
        nn.Module.__init__(self)
        dims = cfg.decoder_dims
        self.conv1 = CausalConv3d(cfg.z_dim, dims[0], 3, padding=1)
        self.middle = _middle(dims[0])
        self.upsamples = build_decoder_layers(cfg)
        self.head = _head(dims[-1], cfg.out_channels * cfg.patch_size ** 2)

    def steps(self) -> list:
        return [self.conv1, *self.middle, *self.upsamples, self.head]


class WanVAEModel(nn.Module):
    """Encoder + ``conv1`` (2z -> 2z) and ``conv2`` (z -> z) + decoder, with official parameter names.

    Build on the ``meta`` device and load with ``load_state_dict(..., assign=True)``: parameters are created
    with ``torch.empty`` and never randomly initialised.
    """

    def __init__(self, cfg: VAEConfig):
        super().__init__()
        self.config = cfg
        self.encoder = Encoder22(cfg) if cfg.residual else Encoder(cfg)
        self.conv1 = CausalConv3d(2 * cfg.z_dim, 2 * cfg.z_dim, 1)
        self.conv2 = CausalConv3d(cfg.z_dim, cfg.z_dim, 1)
        self.decoder = Decoder22(cfg) if cfg.residual else Decoder(cfg)

    def encode_chunk(self, x: torch.Tensor, state: TemporalState | None = None,
                     piece_frames: int | None = 1) -> torch.Tensor:
        """``x`` [B, 3, T, H, W] -> raw mean ``mu`` [B, z_dim, T', H/8, W/8] (the log-variance is not computed).

        ``state=None``: whole sequence (T = 4n+1 -> T' = n+1). With a state: one chunk of a stream
        (frame 0 alone, then 4 frames per chunk -> 1 latent frame each), run ``piece_frames`` frames at a
        time through the layers (``run_steps``; None: the chunk as a whole).
        """
        x = patchify(x, self.config.patch_size)
        if uses_onednn(x, self.conv1.weight):
            # oneDNN convolves channels-last without reordered copies, and the RMS norms then reduce over
            # contiguous channels: the demo VAE encodes 2.0x as fast whole (1.5x streamed), Wan 2.1's widths
            # 1.1x (bench/vae_encode_layout.py, 1 thread, 2-core Zen 4)
            x = x.contiguous(memory_format=CHANNELS_LAST)
        h = self.encoder(x, state, piece_frames)
        z = self.config.z_dim
        bias = self.conv1.bias
        return F.conv3d(h, self.conv1.weight[:z], None if bias is None else bias[:z]).contiguous()

    def decode_chunk(self, z: torch.Tensor, state: TemporalState | None = None,
                     piece_frames: int | None = 1) -> torch.Tensor:
        """``z`` raw latents [B, z_dim, T', H', W'] -> video [B, 3, T, 8H', 8W'] clamped to [-1, 1].

        ``state=None``: whole sequence (T = 1 + 4(T'-1)). With a state: one latent frame of a stream (1 video
        frame for the first, 4 for each later one); after each temporal upsampling the frames continue
        ``piece_frames`` at a time (None: together).
        """
        # contiguous: the full-resolution layers may run channels-last (Resample.channels_last)
        out = unpatchify(self.decoder(self.conv2(z), state, piece_frames), self.config.patch_size)
        return out.clamp_(-1.0, 1.0).contiguous()

    def encode_full(self, x: torch.Tensor) -> torch.Tensor:
        """Whole-sequence encode (the reference form of docs/wan_spec.md section 3.2; memory grows with T)."""
        return self.encode_chunk(x, None)

    def decode_full(self, z: torch.Tensor) -> torch.Tensor:
        """Whole-sequence decode (the reference form of docs/wan_spec.md section 3.2; memory grows with T)."""
        return self.decode_chunk(z, None)


def build_model(cfg: VAEConfig, device: torch.device | str = "meta", dtype: torch.dtype | None = None) -> WanVAEModel:
    """Construct without initialising weights (``meta``: no memory at all; other devices: uninitialised)."""
    if str(device) == "meta":
        with torch.device("meta"):
            return WanVAEModel(cfg).to(dtype=dtype) if dtype else WanVAEModel(cfg)
    with torch.device("meta"):
        model = WanVAEModel(cfg)
    return model.to_empty(device=device).to(dtype=dtype) if dtype else model.to_empty(device=device)
