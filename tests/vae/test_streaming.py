"""Streaming through time: chunked (feature-cache) results equal the whole-sequence formulation of
docs/wan_spec.md section 3.2.

Layer-level references are written here independently in float64 (explicit padding, explicit windows);
model-level: streamed encode/decode vs ``encode_full`` / ``decode_full`` (both also match diffusers,
test_parity.py).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from vae_testlib import randomize_, rand_latents, rand_video

from wan_core.progress import Interrupted
from wan_core.vae.causal_conv import CausalConv3d, TemporalState
from wan_core.vae.resample import Resample

TOL = 1e-5


def _stream(layer, x, sizes):
    state, outs, t = TemporalState(), [], 0
    for n in sizes:
        outs.append(layer(x[:, :, t:t + n], state))
        t += n
    assert t == x.shape[2]
    return torch.cat(outs, dim=2)


def _naive_causal_conv(x, w, b):
    """float64 reference: 2*(kt//2) zero frames in front, H/W zero padding kh//2, kw//2."""
    kt, kh, kw = w.shape[2:]
    x = F.pad(x.double(), (kw // 2, kw // 2, kh // 2, kh // 2, 2 * (kt // 2), 0))
    return F.conv3d(x, w.double(), b.double())


@pytest.mark.parametrize("sizes", [[9], [1, 4, 4], [1, 1, 1, 6], [2, 3, 1, 3]])
def test_causal_conv_stream_equals_naive(sizes):
    torch.manual_seed(0)
    conv = randomize_(CausalConv3d(4, 5, 3, padding=1), 1)
    x = torch.randn(2, 4, 9, 5, 6)
    expected = _naive_causal_conv(x, conv.weight, conv.bias)
    assert (conv(x) - expected).abs().max() <= TOL
    assert (_stream(conv, x, sizes) - expected).abs().max() <= TOL


def _naive_downsample3d(layer, x):
    """float64: per-frame pad right/bottom + 3x3 stride-2 conv; then [frame 0] ++ windows (2i, 2i+1, 2i+2)."""
    w2, b2 = layer.resample[1].weight.double(), layer.resample[1].bias.double()
    frames = [F.conv2d(F.pad(x[:, :, t].double(), (0, 1, 0, 1)), w2, b2, stride=2) for t in range(x.shape[2])]
    wt, bt = layer.time_conv.weight.double()[:, :, :, 0, 0], layer.time_conv.bias.double()  # [C, C, 3]
    out = [frames[0]]
    for s in range(0, len(frames) - 2, 2):
        y = sum(torch.einsum("oc,bchw->bohw", wt[:, :, k], frames[s + k]) for k in range(3))
        out.append(y + bt[None, :, None, None])
    return torch.stack(out, dim=2)


def _naive_upsample3d(layer, x):
    """float64: frame 0 unchanged; frames 1.. through the causal time conv (2 zero frames in front), each
    output split into (group 0, group 1) = two frames; then nearest x2 and a 3x3 conv per frame."""
    c = x.shape[1]
    wt, bt = layer.time_conv.weight.double()[:, :, :, 0, 0], layer.time_conv.bias.double()  # [2C, C, 3]
    src = [torch.zeros_like(x[:, :, 0].double())] * 2 + [x[:, :, t].double() for t in range(1, x.shape[2])]
    frames = [x[:, :, 0].double()]
    for t in range(2, len(src)):
        y = sum(torch.einsum("oc,bchw->bohw", wt[:, :, k], src[t - 2 + k]) for k in range(3))
        y = y + bt[None, :, None, None]
        frames += [y[:, :c], y[:, c:]]
    w2, b2 = layer.resample[1].weight.double(), layer.resample[1].bias.double()
    up = [F.conv2d(f.repeat_interleave(2, -1).repeat_interleave(2, -2), w2, b2, padding=1) for f in frames]
    return torch.stack(up, dim=2)


@pytest.mark.parametrize("sizes", [[9], [1, 2, 2, 2, 2], [1, 4, 4], [3, 6]])
def test_downsample3d_stream_equals_naive(sizes):
    layer = randomize_(Resample(6, "downsample3d"), 2)
    x = torch.randn(1, 6, 9, 6, 4)
    expected = _naive_downsample3d(layer, x)
    assert expected.shape[2] == 5
    assert (layer(x) - expected).abs().max() <= TOL
    assert (_stream(layer, x, sizes) - expected).abs().max() <= TOL


@pytest.mark.parametrize("sizes", [[5], [1, 1, 1, 1, 1], [1, 2, 2], [2, 3]])
def test_upsample3d_stream_equals_naive(sizes):
    layer = randomize_(Resample(6, "upsample3d"), 3)
    x = torch.randn(1, 6, 5, 3, 2)
    expected = _naive_upsample3d(layer, x)
    assert expected.shape == (1, 3, 9, 6, 4)
    assert (layer(x) - expected).abs().max() <= TOL
    assert (_stream(layer, x, sizes) - expected).abs().max() <= TOL


def test_streamed_encode_equals_whole_sequence(vae):
    video = rand_video(17, 32, 40, seed=21)
    with torch.no_grad():
        full = vae.model.encode_full(video)
    streamed = vae.encode(video, tiling="off")
    assert streamed.shape == full.shape == (1, 16, 5, 4, 5)
    assert (streamed - full).abs().max() <= TOL


def test_streamed_decode_equals_whole_sequence(vae):
    z = rand_latents(6, 4, 5, seed=22)
    with torch.no_grad():
        full = vae.model.decode_full(z)
    streamed = vae.decode(z, tiling="off")
    assert streamed.shape == full.shape == (1, 3, 21, 32, 40)
    assert (streamed - full).abs().max() <= TOL


def test_cache_is_scoped_to_one_call(vae):
    """No state survives a call: decoding b after a equals decoding b alone, bit for bit; no new attributes."""
    before = {name: set(vars(m)) for name, m in vae.model.named_modules()}
    a, b = rand_latents(3, 2, 2, seed=1), rand_latents(3, 2, 2, seed=2)
    first_b = vae.decode(b)
    vae.decode(a)
    vae.encode(rand_video(5, 16, 16, seed=3))
    assert torch.equal(vae.decode(b), first_b)
    assert {name: set(vars(m)) for name, m in vae.model.named_modules()} == before


def test_progress_reports_every_chunk(vae):
    calls = []
    vae.decode(rand_latents(4, 2, 2, seed=4, batch=2), progress=lambda done, total: calls.append((done, total)))
    assert calls == [(i, 8) for i in range(1, 9)]
    calls.clear()
    vae.encode(rand_video(9, 16, 16), progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    calls.clear()
    vae.decode(rand_latents(2, 3, 3), tiling="on", tile=2, overlap=1, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(i, 8) for i in range(1, 9)]  # 2x2 tiles x 2 latent frames


def test_interrupt_is_checked_in_every_loop(vae):
    class Stop(Exception):
        pass

    seen = []

    def interrupt():
        seen.append(1)
        if len(seen) == 3:
            raise Stop

    for call in (lambda: vae.decode(rand_latents(5, 2, 2), interrupt=interrupt),
                 lambda: vae.decode(rand_latents(5, 3, 3), tiling="on", tile=2, overlap=1, interrupt=interrupt),
                 lambda: vae.encode(rand_video(17, 16, 16), interrupt=interrupt)):
        seen.clear()
        with pytest.raises(Stop):
            call()
        assert len(seen) == 3
    with pytest.raises(Interrupted, match="decode interrupted"):  # the one interruption type of wan_core
        vae.decode(rand_latents(2, 2, 2), interrupt=lambda: True)


@pytest.mark.parametrize("piece_frames", [None, 1, 2, 3])
def test_frame_pieces_inside_a_chunk_change_nothing(vae, piece_frames):
    """Running the layers after each temporal upsampling (decoder) or from the input (encoder) a few frames
    at a time is the same causal computation on smaller chunks."""
    from wan_core.vae.streaming import stream_decode, stream_encode

    z = rand_latents(4, 3, 4, seed=23)
    video = rand_video(13, 24, 32, seed=24)
    with torch.no_grad():
        full_dec, full_enc = vae.model.decode_full(z), vae.model.encode_full(video)
    dec = torch.zeros_like(full_dec)
    enc = torch.zeros_like(full_enc)

    def dec_sink(b, t, frames):
        dec[b:b + 1, :, t:t + frames.shape[2]] = frames

    def enc_sink(b, i, mu):
        enc[b:b + 1, :, i:i + 1] = mu

    with torch.no_grad():
        stream_decode(vae.model, z, dec_sink, piece_frames=piece_frames)
        stream_encode(vae.model, video, enc_sink, piece_frames=piece_frames)
    assert (dec - full_dec).abs().max() <= TOL
    assert (enc - full_enc).abs().max() <= TOL


def test_encoder_runs_channels_last_on_onednn_and_matches_the_plain_layout(vae):
    """encode_chunk hands the encoder a channels-last input on oneDNN (CPU float32, no gradient): the result equals
    the contiguous input's up to float32 summation order, comes back contiguous, and a training encode (gradient
    on) keeps the plain layout."""
    from wan_core.vae.causal_conv import CHANNELS_LAST

    model, seen = vae.model, []
    hook = model.encoder.register_forward_pre_hook(
        lambda m, args: seen.append(args[0].is_contiguous(memory_format=CHANNELS_LAST) and not args[0].is_contiguous()))
    video = rand_video(9, 32, 40, seed=23)
    try:
        with torch.no_grad():
            z = model.encode_chunk(video, None)
            h = model.encoder(video.contiguous(), None, None)  # the plain layout, as the encoder was called before
            plain = F.conv3d(h, model.conv1.weight[:16], model.conv1.bias[:16])
        model.encode_chunk(video.requires_grad_(True), None)
    finally:
        hook.remove()
    assert seen == [True, False, False]
    assert z.is_contiguous()
    assert (z - plain).abs().max() <= TOL
