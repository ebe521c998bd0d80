"""``--models-dir`` picks each part by what the file is (its header), says which file it used, and refuses
ambiguity with the list of candidates; explicit ``--dit/--vae/--text-encoder`` win."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from wan_core.cli import main, models as cli_models
from wan_core.cli.model_files import find_model, identify


class Loaded(Exception):
    pass


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    """Tiny random models as ComfyUI-style files, plus decoys: a Wan 2.2 VAE header and an image-to-video DiT."""
    from wan_core.config import DIT_PRESETS
    from wan_core.demo import tiny_random_models, tiny_tokenizer_bytes
    from wan_core.dit.model import WanDiT

    root = tmp_path_factory.mktemp("files")
    dit, vae, te = tiny_random_models(seed=3)
    files = {"dit": root / "tiny_dit.safetensors", "vae": root / "vae.safetensors", "te": root / "te.safetensors",
             "vae22": root / "vae22.safetensors", "i2v": root / "i2v.safetensors"}
    save_file({f"model.diffusion_model.{k}": v.contiguous() for k, v in dit.state_dict().items()}, files["dit"])
    save_file({k: v.contiguous() for k, v in vae.model.state_dict().items()}, files["vae"])
    sd = {k: v.contiguous() for k, v in te.model.state_dict().items() if k != "encoder.embed_tokens.weight"}
    sd["spiece_model"] = torch.frombuffer(bytearray(tiny_tokenizer_bytes()), dtype=torch.uint8)
    save_file(sd, files["te"])
    # Wan 2.2's VAE: 48 latent channels and a 12-channel (patchified) input, official key names
    save_file({"conv2.weight": torch.zeros(48, 48, 1, 1, 1), "encoder.conv1.weight": torch.zeros(4, 12, 3, 3, 3),
               "decoder.upsamples.0.residual.0.gamma": torch.zeros(4)}, files["vae22"])
    i2v = WanDiT(DIT_PRESETS["tiny"].replace(in_dim=36))
    save_file({k: v.contiguous() for k, v in i2v.state_dict().items()}, files["i2v"])
    return files


def make_dir(tmp_path, tiny_files, layout: dict[str, str]):
    """``{"diffusion_models/a.safetensors": "dit", ...}`` -> a models folder (symlinks to the tiny files)."""
    root = tmp_path / "models"
    for rel, key in layout.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).symlink_to(tiny_files[key])
    return root


BASE = {"diffusion_models/wan2.1_t2v_1.3B_fp16.safetensors": "dit", "vae/wan_2.1_vae.safetensors": "vae",
        "text_encoders/umt5_xxl_fp8_e4m3fn_scaled.safetensors": "te"}


def run_until_loading(capsys, monkeypatch, *args):
    """Runs ``generate`` up to model loading; returns (exit code or "loaded", stderr lines)."""
    def load_models(*a, **k):
        raise Loaded()

    monkeypatch.setattr(cli_models, "load_models", load_models)
    try:
        code = main(["generate", "--prompt", "a fox", "--out", "x.webp", "--width", "32", "--height", "32",
                         "--frames", "5", "--debug", *args])
    except Loaded:
        code = "loaded"
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_wan22_vae_beside_wan21_vae_picks_the_wan21_one_and_says_so(tmp_path, tiny_files, capsys, monkeypatch):
    root = make_dir(tmp_path, tiny_files, {**BASE, "vae/wan2.2_vae.safetensors": "vae22"})
    code, lines = run_until_loading(capsys, monkeypatch, "--models-dir", str(root))
    assert code == "loaded", lines
    vae_line = next(line for line in lines if line.startswith("wan_core: VAE:"))
    assert "wan_2.1_vae.safetensors" in vae_line and "wan2.2" not in vae_line
    assert any(line.startswith("wan_core: DiT:") and "wan2.1_t2v_1.3B_fp16" in line for line in lines)
    assert any(line.startswith("wan_core: text encoder:") and "umt5" in line for line in lines)


def test_two_dits_are_refused_with_the_candidates(tmp_path, tiny_files, capsys, monkeypatch):
    root = make_dir(tmp_path, tiny_files, {**BASE, "diffusion_models/wan2.1_t2v_14B_bf16.safetensors": "dit"})
    monkeypatch.setattr(cli_models, "load_models", lambda *a, **k: (_ for _ in ()).throw(Loaded()))
    code = main(["generate", "--prompt", "a fox", "--out", str(tmp_path / "x.webp"), "--models-dir", str(root)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert "2 files in" in lines[0] and "wan2.1_t2v_1.3B_fp16.safetensors" in lines[0]
    assert "wan2.1_t2v_14B_bf16.safetensors" in lines[0] and "--dit" in lines[0]


def test_explicit_path_wins_over_an_ambiguous_folder(tmp_path, tiny_files, capsys, monkeypatch):
    root = make_dir(tmp_path, tiny_files, {**BASE, "diffusion_models/other.safetensors": "dit"})
    code, lines = run_until_loading(capsys, monkeypatch, "--models-dir", str(root), "--dit",
                                    str(root / "diffusion_models" / "other.safetensors"))
    assert code == "loaded", lines
    assert any(line.startswith("wan_core: DiT:") and "other.safetensors" in line for line in lines)


def test_files_are_recognised_by_header_not_by_name(tmp_path, tiny_files, capsys, monkeypatch):
    """A fine-tune without "t2v" in its name is found; an image-to-video DiT beside it is not a candidate."""
    root = make_dir(tmp_path, tiny_files, {"diffusion_models/my_finetune.safetensors": "dit",
                                           "diffusion_models/wan2.1_t2v_i2v_mixup.safetensors": "i2v",
                                           "vae/wan_2.1_vae.safetensors": "vae",
                                           "text_encoders/umt5.safetensors": "te"})
    code, lines = run_until_loading(capsys, monkeypatch, "--models-dir", str(root))
    assert code == "loaded", lines
    assert any(line.startswith("wan_core: DiT:") and "my_finetune" in line for line in lines)


def test_wrong_explicit_file_is_refused_before_loading(tmp_path, tiny_files, capsys, monkeypatch):
    monkeypatch.setattr(cli_models, "load_models", lambda *a, **k: (_ for _ in ()).throw(Loaded()))
    code = main(["generate", "--prompt", "a fox", "--out", str(tmp_path / "x.webp"), "--dit",
                     str(tiny_files["vae"]), "--vae", str(tiny_files["vae"]), "--text-encoder", str(tiny_files["te"])])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "--dit" in lines[0] and "Wan 2.1 video VAE" in lines[0], lines


def test_identify_reads_what_each_file_is(tiny_files):
    assert identify(tiny_files["dit"], "dit").ok
    assert not identify(tiny_files["i2v"], "dit").ok and "image-to-video" in identify(tiny_files["i2v"], "dit").problem
    assert identify(tiny_files["vae"], "vae").ok
    vae22 = identify(tiny_files["vae22"], "vae")  # usable for a 48-channel DiT only (tests/model_files)
    assert vae22.ok and vae22.channels == 48 and "Wan 2.2 VAE" in vae22.what
    assert identify(tiny_files["te"], "text_encoder").ok and "tokenizer embedded" in identify(tiny_files["te"],
                                                                                              "text_encoder").what
    assert not identify(tiny_files["vae"], "text_encoder").ok


def test_no_candidate_says_what_was_seen(tmp_path, tiny_files):
    root = make_dir(tmp_path, tiny_files, {"vae/wan2.2_vae.safetensors": "vae22"})
    with pytest.raises(ValueError, match="no Wan 2.1 VAE found in .*wan2.2_vae.safetensors: .*Wan 2.2 VAE"):
        find_model(root, "vae")
