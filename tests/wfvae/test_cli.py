"""``python -m wan_core vae encode|decode|roundtrip`` with the official tiny WF-VAE: results equal the library's,
the printed PSNR equals one computed here from the files, bad input is one line with exit code 2 (before the
model loads where it can be), an interruption exits 130 without writing the output."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file

import wan_core
from wan_core.cli import main
from wan_core.cli import vae as cli_vae
from wan_core.wfvae import latent_format
from wan_core.wfvae.autoencoder import WFVAE

from .test_parity import official


def write_frames(folder, frames: np.ndarray) -> None:
    folder.mkdir()
    for i, f in enumerate(frames):
        Image.fromarray(f).save(folder / f"frame_{i:05d}.png")


def read_frames(folder) -> np.ndarray:
    return np.stack([np.asarray(Image.open(p).convert("RGB")) for p in sorted(folder.glob("frame_*.png"))])


@pytest.fixture
def setup(tmp_path):
    weights, _, _ = official("4x8x8")
    torch.save({"state_dict": {"gen_model": weights}}, tmp_path / "wf.ckpt")
    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 255, 24)[None, None, :, None] * np.ones((11, 16, 1, 3))
    frames = np.clip(ramp + rng.normal(0, 20, ramp.shape), 0, 255).astype(np.uint8)  # [11, 16, 24, 3]
    write_frames(tmp_path / "in", frames)
    return tmp_path, frames, wan_core.load_vae(tmp_path / "wf.ckpt")


def to_video(frames: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(frames).permute(3, 0, 1, 2)[None].float() / 127.5 - 1


def to_uint8(video: torch.Tensor) -> np.ndarray:
    return ((video[0].clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 3, 0).numpy()


def test_encode_decode_roundtrip_match_the_library(setup, capsys):
    tmp, frames, vae = setup
    assert isinstance(vae, WFVAE) and cli_vae.FORMAT_KEY == latent_format.FORMAT_KEY
    vae_flag = ["--vae", str(tmp / "wf.ckpt")]
    assert main(["vae", "encode", str(tmp / "in"), str(tmp / "z.safetensors"), "--frames", "9", *vae_flag]) == 0
    z = load_file(tmp / "z.safetensors")["latent"]
    want = vae.encode(to_video(frames[:9]))
    assert z.shape == (1, 4, 3, 2, 3) and torch.allclose(z, want, atol=1e-5)
    with safe_open(tmp / "z.safetensors", "pt") as f:
        assert f.metadata()[latent_format.FORMAT_KEY] == "wfvae-4x8x8-4ch"
    assert main(["vae", "decode", str(tmp / "z.safetensors"), str(tmp / "dec"), *vae_flag]) == 0
    assert np.abs(read_frames(tmp / "dec").astype(int) - to_uint8(vae.decode(z)).astype(int)).max() <= 1
    capsys.readouterr()
    assert main(["vae", "roundtrip", str(tmp / "in"), str(tmp / "rt"), "--frames", "9", *vae_flag]) == 0
    out = read_frames(tmp / "rt")
    mse = np.mean((out.astype(np.float64) - frames[:9].astype(np.float64)) ** 2)
    printed = float(re.search(r"roundtrip PSNR ([\d.]+) dB \(9 frames of 24x16", capsys.readouterr().out).group(1))
    assert printed == pytest.approx(10 * math.log10(255 ** 2 / mse), abs=0.01)


def refused(capsys, argv: list[str], words: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(words, err) and err.count("\n") == 1, err


def test_bad_input_is_one_line_exit_2(setup, capsys, monkeypatch):
    tmp, _, _ = setup
    vae_flag = ["--vae", str(tmp / "wf.ckpt")]
    refused(capsys, ["vae", "encode", str(tmp / "in"), str(tmp / "z.safetensors"), *vae_flag],
            r"11 frames; this VAE encodes 1 \+ 4k frames: pass --frames 9$")
    refused(capsys, ["vae", "roundtrip", str(tmp / "in"), str(tmp / "o"), "--frames", "13", *vae_flag],
            r"--frames 13: .* has only 11 frames")

    def no_load(*a, **k):
        raise AssertionError("the model loaded before the refusal")

    monkeypatch.setattr(wan_core, "load_vae", no_load)
    refused(capsys, ["vae", "encode", str(tmp / "in"), str(tmp / "z.mp4"), *vae_flag], r"ending in \.safetensors")
    refused(capsys, ["vae", "encode", str(tmp / "nope"), str(tmp / "z.safetensors"), *vae_flag],
            r"no such video file")
    refused(capsys, ["vae", "encode", str(tmp / "in"), str(tmp / "z.safetensors"), "--vae", str(tmp / "x.ckpt")],
            r"--vae .*x\.ckpt: no such file")
    refused(capsys, ["vae", "decode", str(tmp / "wf.ckpt"), str(tmp / "o.gif"), *vae_flag], r"latent file")
    refused(capsys, ["vae", "roundtrip", str(tmp / "in"), str(tmp / "o.png"), *vae_flag], r"folder name")
    refused(capsys, ["vae", "squash", str(tmp / "in"), str(tmp / "o"), *vae_flag], r"invalid choice: 'squash'")


def test_latents_of_another_vae_and_interruption(setup, capsys, monkeypatch):
    tmp, _, vae = setup
    weights, _, _ = official("8x8x8")
    torch.save(weights, tmp / "wf888.ckpt")
    assert main(["vae", "encode", str(tmp / "in"), str(tmp / "z.safetensors"), "--frames", "9",
                 "--vae", str(tmp / "wf.ckpt")]) == 0
    refused(capsys, ["vae", "decode", str(tmp / "z.safetensors"), str(tmp / "o"), "--vae", str(tmp / "wf888.ckpt")],
            r"latents of wfvae-4x8x8-4ch, but --vae .* is wfvae-8x8x8-4ch")
    calls, decode = [], type(vae.model).decode

    def interrupt_second(self, *args, **kwargs):  # Ctrl-C while the second latent frame decodes
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(type(vae.model), "decode", interrupt_second)
    capsys.readouterr()
    assert main(["vae", "decode", str(tmp / "z.safetensors"), str(tmp / "o"), "--vae", str(tmp / "wf.ckpt")]) == 130
    assert "interrupted" in capsys.readouterr().err and not (tmp / "o").exists() and len(calls) == 2

