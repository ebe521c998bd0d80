"""The main job: ``python -m wan_core generate`` on the tiny-random preset writes a playable video."""
from __future__ import annotations

import subprocess
import sys

import pytest


def run_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wan_core", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_generate_tiny_random_writes_playable_mp4(tmp_path):
    av = pytest.importorskip("av")
    out = tmp_path / "x.mp4"
    res = run_cli("generate", "--preset", "tiny-random", "--prompt", "a fox in the snow", "--out", str(out),
                  "--frames", "9", "--width", "64", "--height", "48", "--steps", "3")
    assert res.returncode == 0, res.stderr
    assert "RANDOM weights" in res.stderr
    with av.open(str(out)) as container:
        frames = list(container.decode(video=0))
    assert len(frames) == 9
    assert (frames[0].width, frames[0].height) == (64, 48)


def test_generate_with_acceleration_flags(tmp_path):
    av = pytest.importorskip("av")
    out = tmp_path / "fast.mp4"
    res = run_cli("generate", "--preset", "tiny-random", "--prompt", "x", "--out", str(out), "--frames", "5",
                  "--steps", "2", "--attention", "int8", "--skiparse", "osp13", "--weights", "fp8_scaled")
    assert res.returncode == 0, res.stderr
    with av.open(str(out)) as container:
        assert len(list(container.decode(video=0))) == 5


def test_generate_webp_and_png_folder(tmp_path):
    from PIL import Image

    res = run_cli("generate", "--preset", "tiny-random", "--prompt", "x", "--out", str(tmp_path / "a.webp"),
                  "--frames", "5", "--steps", "2")
    assert res.returncode == 0, res.stderr
    with Image.open(tmp_path / "a.webp") as im:
        assert im.n_frames == 5 and im.size == (64, 64)
    res = run_cli("generate", "--preset", "tiny-random", "--prompt", "x", "--out", str(tmp_path / "frames"),
                  "--frames", "5", "--steps", "2")
    assert res.returncode == 0, res.stderr
    assert len(list((tmp_path / "frames").glob("*.png"))) == 5


@pytest.mark.parametrize("flags, message", [
    (["--frames", "80"], "nearest valid: 77 or 81"),
    (["--width", "830"], "multiple of 16; nearest valid: 816 or 832"),
    (["--steps", "0"], "steps=0"),
    (["--solver", "heun"], "invalid choice: 'heun'"),
    (["--guidance", "-1"], "guidance=-1.0"),
    (["--gemm", "scaled_mm"], "needs fp8 weights"),
])
def test_bad_flags_give_one_line_and_exit_2(tmp_path, flags, message):
    res = run_cli("generate", "--preset", "tiny-random", "--prompt", "x", "--out", str(tmp_path / "x.mp4"), *flags)
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr


def test_unusable_model_file_is_one_line_error(tmp_path):
    dit = tmp_path / "dit.safetensors"
    dit.write_bytes(b"")
    res = run_cli("generate", "--prompt", "x", "--out", str(tmp_path / "x.mp4"), "--dit", str(dit))
    assert res.returncode == 2
    assert "--dit" in res.stderr and "empty" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_preset_with_model_files_is_refused(tmp_path):
    res = run_cli("generate", "--preset", "tiny-random", "--prompt", "x", "--out", str(tmp_path / "x.mp4"),
                  "--dit", str(tmp_path))
    assert res.returncode == 2
    assert "brings its own models" in res.stderr and "--dit" in res.stderr


def test_generate_from_a_models_folder(tmp_path):
    """The real loading path: files in a ComfyUI-style folder, found by name, loaded with progress."""
    import torch
    from safetensors.torch import save_file

    from wan_core.demo import tiny_random_models, tiny_tokenizer_bytes

    dit, vae, te = tiny_random_models(seed=3)
    models = tmp_path / "models"
    for sub in ("diffusion_models", "vae", "text_encoders"):
        (models / sub).mkdir(parents=True)
    save_file({f"model.diffusion_model.{k}": v.contiguous() for k, v in dit.state_dict().items()},
              models / "diffusion_models" / "tiny_wan_t2v.safetensors")
    save_file({k: v.contiguous() for k, v in vae.model.state_dict().items()}, models / "vae" / "tiny_wan_vae.safetensors")
    sd = {k: v.contiguous() for k, v in te.model.state_dict().items() if k != "encoder.embed_tokens.weight"}
    sd["spiece_model"] = torch.frombuffer(bytearray(tiny_tokenizer_bytes()), dtype=torch.uint8)
    save_file(sd, models / "text_encoders" / "tiny_umt5.safetensors")
    out = tmp_path / "out.webp"
    res = run_cli("generate", "--models-dir", str(models), "--prompt", "a fox", "--out", str(out), "--frames", "5",
                  "--width", "32", "--height", "32", "--steps", "2", "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert out.exists() and "wrote" in res.stderr
    res = run_cli("generate", "--models-dir", str(tmp_path / "empty"), "--prompt", "x", "--out", str(out))
    assert res.returncode == 2 and "empty: no such folder" in res.stderr
