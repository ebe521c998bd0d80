"""``python -m wan_core generate --lora FILE[:STRENGTH]`` (repeatable), ``--convention lightx2v_distill`` and
``--nag-scale``: a 4-step distilled run at guidance 1 with NAG on the tiny-random preset, end to end
(docs/lora.md sections 4-6)."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from wan_core.cli.loras import parse_lora
from wan_core.demo import tiny_random_models
from wan_core.cli.video_io import read_metadata

from ..lora.helpers import kohya_file, official_file, random_lora


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wan_core", *args], capture_output=True, text=True, timeout=300)


def test_parse_lora():
    assert parse_lora("a.safetensors") == ("a.safetensors", 1.0)
    assert parse_lora("dir/a.safetensors:0.6") == ("dir/a.safetensors", 0.6)
    assert parse_lora("C:/loras/a.safetensors") == ("C:/loras/a.safetensors", 1.0)
    assert parse_lora("x.safetensors:-1.5") == ("x.safetensors", -1.5)


def test_distilled_run_with_two_loras(tmp_path):
    pytest.importorskip("PIL")
    cfg = tiny_random_models(seed=0)[0].config
    style, distill = tmp_path / "style.safetensors", tmp_path / "distill.safetensors"
    save_file(official_file(random_lora(cfg, seed=1)), style)
    sd = kohya_file(random_lora(cfg, seed=2))
    sd["lora_unet_blocks_0_not_a_layer.lora_down.weight"] = torch.zeros(2, 2)
    save_file(sd, distill)
    out = tmp_path / "frames"
    res = run_cli("generate", "--preset", "tiny-random", "--prompt", "a fox", "--out", str(out), "--frames", "5",
                  "--steps", "4", "--guidance", "1", "--shift", "5", "--solver", "euler",
                  "--convention", "lightx2v_distill", "--lora", f"{style}:0.7", "--lora", str(distill),
                  "--negative-prompt", "blurry", "--nag-scale", "11")
    assert res.returncode == 0, res.stderr
    assert "LoRA style.safetensors (official layout) at strength 0.7, merged: 20 parameters patched" in res.stderr
    assert "LoRA distill.safetensors (kohya layout) at strength 1, merged: 20 parameters patched; 1 keys not used" \
        in res.stderr
    assert len(list(out.glob("*.png"))) == 5
    meta = read_metadata(out)
    assert meta["loras"] == ["style.safetensors:0.7", "distill.safetensors:1"]
    assert meta["convention"] == "lightx2v_distill" and meta["nag"] == [11.0, 2.5, 0.25]


def run_in_process(capsys, *args: str) -> tuple[int, str]:
    """The CLI's flag checks run before any model is loaded: called in this process (no interpreter start)."""
    from wan_core.cli import main

    code = main(list(args))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("flag, message", [
    ("missing.safetensors:0.5", "--lora missing.safetensors:0.5: no such file 'missing.safetensors'"),
    ("x.safetensors:nan", "the strength must be a finite number"),
])
def test_bad_lora_flag_is_one_line(tmp_path, capsys, flag, message):
    code, err = run_in_process(capsys, "generate", "--preset", "tiny-random", "--prompt", "x", "--out",
                               str(tmp_path / "a.webp"), "--lora", flag)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_nag_with_cfg_is_one_line(tmp_path, capsys):
    code, err = run_in_process(capsys, "generate", "--preset", "tiny-random", "--prompt", "x", "--out",
                               str(tmp_path / "a.webp"), "--guidance", "5", "--nag-scale", "11")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--nag-scale 11 applies the negative prompt at guidance 1, but guidance is 5" in err


@pytest.mark.slow  # the refusal itself is tested in tests/lora/test_errors.py; this is the CLI's one-line form
def test_lora_for_another_model_is_one_line(tmp_path):
    flux = tmp_path / "flux_detail.safetensors"
    save_file({"diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight": torch.randn(2, 8),
               "diffusion_model.double_blocks.0.img_attn.qkv.lora_B.weight": torch.randn(8, 2)}, flux)
    res = run_cli("generate", "--preset", "tiny-random", "--prompt", "x", "--out", str(tmp_path / "a.webp"),
                  "--lora", str(flux))
    assert res.returncode != 0
    assert "flux_detail.safetensors: a LoRA for Flux" in res.stderr and len(res.stderr.strip().splitlines()) == 1, \
        res.stderr


def test_huge_strength_flag_is_a_usage_error(tmp_path, capsys):
    lora = tmp_path / "x.safetensors"
    save_file(official_file(random_lora()), lora)
    for flag in ("--lora", "--lora-high"):
        code, err = run_in_process(capsys, "generate", "--preset", "tiny-random", "--prompt", "x", "--out",
                                   str(tmp_path / "a.webp"), flag, f"{lora}:1e39")
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"{flag} {lora}:1e39: the strength must be a finite number from -100 to 100" in err, err


def test_nonfinite_lora_file_is_named_in_one_line(tmp_path, capsys):
    cfg = tiny_random_models(seed=0)[0].config
    sd = official_file(random_lora(cfg, seed=1))
    key = next(k for k in sd if k.endswith("lora_B.weight"))
    sd[key][0, 0] = float("nan")
    lora = tmp_path / "broken.safetensors"
    save_file(sd, lora)
    code, err = run_in_process(capsys, "generate", "--preset", "tiny-random", "--prompt", "x", "--out",
                               str(tmp_path / "a.webp"), "--frames", "5", "--steps", "1", "--lora", str(lora))
    lines = [line for line in err.splitlines() if line.startswith("error")]
    assert code != 0 and len(lines) == 1, err
    assert "broken.safetensors" in lines[0] and f"{key} holds NaN/Inf values" in lines[0], err
