"""The command line with Wan 2.2 models on tiny random weights (docs/wan22.md section 6): the two A14B experts
(--dit-high/--dit-low) and the TI2V-5B DiT with the Wan 2.2 VAE write videos with the right frame count and fps;
bad combinations are refused in one line before any model loads."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from wan_core.cli import main
from wan_core.demo import random_vae_model, tiny_random_models, tiny_tokenizer_bytes
from wan_core.dit.model import WanDiT
from wan_core.vae import TINY_VAE22
from wan_core.cli.video_io import read_metadata


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan22cli")
    dit, vae, te = tiny_random_models(seed=3)
    out = {"high": root / "wan2.2_t2v_high_noise_tiny.safetensors",
           "low": root / "wan2.2_t2v_low_noise_tiny.safetensors",
           "vae": root / "vae.safetensors", "te": root / "te.safetensors", "ti2v": root / "ti2v_5b_tiny.safetensors",
           "vae22": root / "wan2.2_vae.safetensors"}
    save_file({k: v.contiguous() for k, v in dit.state_dict().items()}, out["high"])
    torch.manual_seed(1)
    save_file({k: v + 0.02 * torch.randn_like(v) for k, v in dit.state_dict().items()}, out["low"])
    save_file({k: v.contiguous() for k, v in vae.model.state_dict().items()}, out["vae"])
    sd = {k: v.contiguous() for k, v in te.model.state_dict().items() if k != "encoder.embed_tokens.weight"}
    sd["spiece_model"] = torch.frombuffer(bytearray(tiny_tokenizer_bytes()), dtype=torch.uint8)
    save_file(sd, out["te"])
    ti2v = WanDiT(dit.config.replace(in_dim=48, out_dim=48))
    save_file({k: v.contiguous() for k, v in ti2v.state_dict().items()}, out["ti2v"])
    save_file({k: v.contiguous() for k, v in random_vae_model(TINY_VAE22, 2).state_dict().items()}, out["vae22"])
    return out


def test_a14b_experts_write_a_video(files, tmp_path, capsys):
    out = tmp_path / "moe.webp"
    code = main(["generate", "--dit-high", str(files["high"]), "--dit-low", str(files["low"]), "--vae",
                 str(files["vae"]), "--text-encoder", str(files["te"]), "--prompt", "a fox", "--out", str(out),
                 "--width", "64", "--height", "48", "--frames", "9", "--steps", "6"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "high-noise expert, by its name" in err and "low-noise expert" in err
    meta = read_metadata(out)
    assert meta["frames"] == 9 and meta["fps"] == 16 and meta["steps"] == 6 and meta["shift"] == 12.0


def test_ti2v_5b_writes_a_video_at_24_fps(files, tmp_path, capsys):
    out = tmp_path / "ti2v.webp"
    code = main(["generate", "--dit", str(files["ti2v"]), "--vae", str(files["vae22"]), "--text-encoder",
                 str(files["te"]), "--prompt", "a fox", "--out", str(out), "--width", "64", "--height", "32",
                 "--frames", "9", "--steps", "2"])
    err = capsys.readouterr().err
    assert code == 0, err
    meta = read_metadata(out)
    assert meta["frames"] == 9 and meta["fps"] == 24 and (meta["width"], meta["height"]) == (64, 32)


def test_ti2v_5b_image_to_video_keeps_the_first_frame(files, tmp_path, capsys):
    from PIL import Image

    picture = tmp_path / "start.png"
    Image.fromarray((torch.rand(40, 70, 3, generator=torch.Generator().manual_seed(0)) * 255).byte().numpy()).save(
        picture)
    out = tmp_path / "frames"
    code = main(["generate", "--dit", str(files["ti2v"]), "--vae", str(files["vae22"]), "--text-encoder",
                 str(files["te"]), "--prompt", "a fox", "--out", str(out), "--image", str(picture), "--width", "64",
                 "--height", "32", "--frames", "9", "--steps", "2"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "TI2V first frame at 64x32" in err
    frames = sorted(out.glob("*.png"))
    assert len(frames) == 9 and Image.open(frames[0]).size == (64, 32)


@pytest.mark.parametrize("flags, message", [
    (["--dit-high", "{high}"], "--dit-high and --dit-low go together"),
    (["--dit", "{high}", "--boundary", "0.9"], "--boundary applies to the two A14B experts"),
    (["--dit-high", "{high}", "--dit-low", "{low}", "--boundary", "1.2"], "--boundary 1.2: must lie between 0 and 1"),
    (["--dit", "{ti2v}", "--width", "48"], "multiples of 32"),
    (["--dit", "{ti2v}", "--vae", "{vae}"], "works on 48-channel latents but the VAE 'vae.safetensors' has 16"),
])
def test_bad_combinations_one_line(files, tmp_path, capsys, flags, message):
    args = [f.format(**{k: str(v) for k, v in files.items()}) for f in flags]
    if "--vae" not in args:
        args += ["--vae", str(files["vae22"] if "{ti2v}" in flags else files["vae"])]
    code = main(["generate", *args, "--text-encoder", str(files["te"]), "--prompt", "x", "--out",
                 str(tmp_path / "x.webp"), "--frames", "5", "--steps", "2", "--height", "64"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error") or "wan_core:" in line]
    assert code == 2, err
    assert any(message in line for line in err), err
