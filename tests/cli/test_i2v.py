"""``python -m wan_core generate --image start.png [--last-image end.png]`` (docs/i2v.md section 8): an I2V / FLF2V
DiT and the CLIP vision file found in --models-dir by their headers, a video written from tiny random models, and
one-line errors before any sampling for bad requests."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from wan_core.cli import main, models as cli_models

from ..i2v.test_load_image import bomb_png

CLIP = 24


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A ComfyUI-style models folder with tiny random I2V and FLF2V DiTs, VAE, umT5, CLIP vision, and two images."""
    from PIL import Image
    from transformers import CLIPVisionConfig, CLIPVisionModel

    from wan_core.config import DIT_PRESETS
    from wan_core.demo import tiny_random_models, tiny_tokenizer_bytes
    from wan_core.dit.model import WanDiT

    root = tmp_path_factory.mktemp("models")
    for sub in ("diffusion_models", "vae", "text_encoders", "clip_vision", "flf2v"):
        (root / sub).mkdir()
    _dit, vae, te = tiny_random_models(seed=3)
    torch.manual_seed(0)
    base = DIT_PRESETS["tiny"].replace(text_dim=te.text_dim, in_dim=36, image_dim=CLIP)
    save_file({k: v.contiguous() for k, v in WanDiT(base).state_dict().items()},
              root / "diffusion_models" / "wan2.1_i2v_480p_14B_fp16.safetensors")
    save_file({k: v.contiguous() for k, v in WanDiT(base.replace(image_pos_len=10)).state_dict().items()},
              root / "flf2v" / "wan2.1_flf2v_720p_14B_fp16.safetensors")
    save_file({k: v.contiguous() for k, v in vae.model.state_dict().items()}, root / "vae" / "wan_2.1_vae.safetensors")
    sd = {k: v.contiguous() for k, v in te.model.state_dict().items() if k != "encoder.embed_tokens.weight"}
    sd["spiece_model"] = torch.frombuffer(bytearray(tiny_tokenizer_bytes()), dtype=torch.uint8)
    save_file(sd, root / "text_encoders" / "umt5_xxl_fp16.safetensors")
    clip = CLIPVisionModel(CLIPVisionConfig(hidden_size=CLIP, intermediate_size=48, num_hidden_layers=2,
                                            num_attention_heads=2, image_size=28, patch_size=14))
    save_file({(k if k.startswith("vision_model.") else f"vision_model.{k}"): v.contiguous()
               for k, v in clip.state_dict().items() if not k.endswith("position_ids")},
              root / "clip_vision" / "clip_vision_h.safetensors")
    g = torch.Generator().manual_seed(1)
    for name in ("start.png", "end.png"):
        pixels = (torch.rand(40, 56, 3, generator=g) * 255).to(torch.uint8).numpy()
        Image.fromarray(pixels).save(root / name)
    (root / "not_an_image.png").write_text("hello")
    bomb_png(root / "bomb.png")
    return root


def run(capsys, *args):
    code = main(["generate", "--prompt", "a fox", "--width", "64", "--height", "48", "--frames", "5",
                     "--steps", "2", *args])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_image_to_video_from_a_models_folder(models, tmp_path, capsys):
    out = tmp_path / "i2v.webp"
    code, lines = run(capsys, "--models-dir", str(models), "--image", str(models / "start.png"), "--out", str(out))
    assert code == 0, lines
    assert any("DiT:" in line and "wan2.1_i2v_480p_14B" in line and "I2V" in line for line in lines), lines
    assert any("CLIP vision" in line and "clip_vision_h" in line for line in lines), lines
    assert out.exists() and out.stat().st_size > 0


def test_first_last_frame_with_explicit_files(models, tmp_path, capsys):
    out = tmp_path / "flf2v.webp"
    code, lines = run(capsys, "--dit", str(models / "flf2v" / "wan2.1_flf2v_720p_14B_fp16.safetensors"),
                      "--vae", str(models / "vae" / "wan_2.1_vae.safetensors"),
                      "--text-encoder", str(models / "text_encoders" / "umt5_xxl_fp16.safetensors"),
                      "--clip-vision", str(models / "clip_vision" / "clip_vision_h.safetensors"),
                      "--image", str(models / "start.png"), "--last-image", str(models / "end.png"), "--out", str(out))
    assert code == 0, lines
    assert out.exists()


@pytest.mark.parametrize("extra, pattern", [
    (("--last-image", "{m}/end.png"), "--last-image needs --image"),
    (("--image", "{m}/missing.png"), "--image .*missing.png: no such file"),
    (("--image", "{m}/not_an_image.png"), "not a readable image"),
    (("--image", "{m}/bomb.png"), "--image .*bomb.png: image too large"),
    (("--image", "{m}/start.png", "--last-image", "{m}/bomb.png"), "--last-image .*bomb.png: image too large"),
    (("--image", "{m}/start.png", "--last-image", "{m}/end.png"), "one-image I2V DiT; a last image needs"),
    (("--image", "{m}/start.png", "--preset", "demo"), "--preset demo is text-to-video"),
    (("--image", "{m}/start.png", "--width", "60"), "width=60: must be a multiple of 16"),
])
def test_bad_requests_are_one_line_before_sampling(models, tmp_path, capsys, monkeypatch, extra, pattern):
    import re

    def no_sampling(*a, **k):
        raise AssertionError("sampled")

    monkeypatch.setattr("wan_core.pipeline.WanPipeline.sample_latents", no_sampling)
    args = [a.format(m=models) for a in extra]
    base = [] if "--preset" in args else ["--models-dir", str(models)]
    code, lines = run(capsys, *base, *args, "--out", str(tmp_path / "x.webp"))
    assert code == 2, lines
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == lines[-1:] and re.search(pattern, lines[-1]), lines  # one line, the last one


def test_missing_clip_vision_is_refused_before_loading(models, tmp_path, capsys):
    code, lines = run(capsys, "--dit", str(models / "diffusion_models" / "wan2.1_i2v_480p_14B_fp16.safetensors"),
                      "--vae", str(models / "vae" / "wan_2.1_vae.safetensors"),
                      "--text-encoder", str(models / "text_encoders" / "umt5_xxl_fp16.safetensors"),
                      "--image", str(models / "start.png"), "--out", str(tmp_path / "x.webp"))
    assert code == 2 and len(lines) == 1 and "needs the CLIP vision encoder" in lines[0], lines


def test_image_without_size_gets_the_official_i2v_size(models, tmp_path, capsys, monkeypatch):
    """56x40 image, max area 832x480: sqrt(399360 * 40/56) = 534 -> 528 (multiple of 16, floored), 736 wide
    (Wan2.1 wan/image2video.py lines 184-193)."""
    from wan_core.i2v import official_size

    assert official_size(720, 1280, 1280 * 720) == (1280, 720)
    assert official_size(480, 832) == (832, 464)  # the official float arithmetic floors 479.99999 to 464

    class Loaded(Exception):
        pass

    monkeypatch.setattr(cli_models, "load_models", lambda *a, **k: (_ for _ in ()).throw(Loaded()))
    with pytest.raises(Loaded):
        main(["generate", "--prompt", "a fox", "--models-dir", str(models), "--image", str(models / "start.png"),
                  "--out", str(tmp_path / "x.webp"), "--debug"])
    lines = capsys.readouterr().err.splitlines()
    assert any("video size 736x528" in line for line in lines), lines
