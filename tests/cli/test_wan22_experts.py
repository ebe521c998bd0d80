"""The command line with the two Wan 2.2 A14B experts (docs/wan22.md section 6) and what used to be refused with
them: --lora (applied to each expert with ``wan_core.apply_lora``), --blocks-to-swap (block swap per expert,
``wan_core.memory``) and --image with two 36-channel I2V-A14B experts without CLIP (official I2V-A14B settings:
boundary 0.900, shift 5.0, guidance 3.5 / 3.5). Tiny random models written to temporary files."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from wan_core.cli import main
from wan_core.demo import tiny_random_models, tiny_tokenizer_bytes
from wan_core.cli.video_io import read_metadata

from ..lora.helpers import official_file, random_lora

SIZE = ["--width", "64", "--height", "48", "--frames", "5", "--steps", "3"]


def _save(model, path):
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from PIL import Image

    from wan_core.config import DIT_PRESETS
    from wan_core.dit.model import WanDiT

    root = tmp_path_factory.mktemp("wan22experts")
    dit, vae, te = tiny_random_models(seed=3)
    out = {"high": root / "wan2.2_t2v_high_noise_tiny.safetensors",
           "low": root / "wan2.2_t2v_low_noise_tiny.safetensors",
           "i2v_high": root / "wan2.2_i2v_high_noise_tiny.safetensors",
           "i2v_low": root / "wan2.2_i2v_low_noise_tiny.safetensors",
           "vae": root / "vae.safetensors", "te": root / "te.safetensors", "lora": root / "style.safetensors",
           "image": root / "start.png"}
    _save(dit, out["high"])
    torch.manual_seed(1)
    save_file({k: v + 0.02 * torch.randn_like(v) for k, v in dit.state_dict().items()}, out["low"])
    # Wan 2.2 I2V-A14B experts: 36 input channels (16 noise + 4 mask + 16 image latent), no img_emb (no CLIP)
    i2v = DIT_PRESETS["tiny"].replace(text_dim=te.text_dim, in_dim=36)
    torch.manual_seed(2)
    _save(WanDiT(i2v), out["i2v_high"])
    _save(WanDiT(i2v), out["i2v_low"])
    _save(vae.model, out["vae"])
    torch.manual_seed(3)
    out["wide_low"] = root / "other_low_noise_wide.safetensors"
    _save(WanDiT(dit.config.replace(dim=128, num_heads=4)), out["wide_low"])
    sd = {k: v.contiguous() for k, v in te.model.state_dict().items() if k != "encoder.embed_tokens.weight"}
    sd["spiece_model"] = torch.frombuffer(bytearray(tiny_tokenizer_bytes()), dtype=torch.uint8)
    save_file(sd, out["te"])
    save_file(official_file(random_lora(dit.config, seed=4)), out["lora"])
    pixels = (torch.rand(40, 56, 3, generator=torch.Generator().manual_seed(0)) * 255).to(torch.uint8).numpy()
    Image.fromarray(pixels).save(out["image"])
    return out


def _frames(folder) -> np.ndarray:
    from PIL import Image

    paths = sorted(folder.glob("*.png"))
    return np.stack([np.asarray(Image.open(p)) for p in paths])


def _run(capsys, high, low, out, *extra) -> str:
    code = main(["generate", "--dit-high", str(high), "--dit-low", str(low), "--prompt", "a fox", "--out", str(out),
                 *SIZE, *extra])
    err = capsys.readouterr().err
    assert code == 0, err
    return err


def test_lora_on_both_experts_equals_merging_by_hand(files, tmp_path, capsys):
    """--lora with the experts = the same LoRA merged by hand (``apply_lora``) into each expert's file; with
    --blocks-to-swap (a noted no-op on the CPU) accepted too. Without the LoRA the video differs."""
    from wan_core import apply_lora, load_dit

    common = ["--vae", str(files["vae"]), "--text-encoder", str(files["te"])]
    err = _run(capsys, files["high"], files["low"], tmp_path / "lora", *common, "--lora", f"{files['lora']}:0.8",
               "--blocks-to-swap", "1")
    assert "high-noise expert: LoRA style.safetensors (official layout) at strength 0.8, merged" in err
    assert "low-noise expert: LoRA style.safetensors (official layout) at strength 0.8, merged" in err
    assert "no-op on a CPU-only run" in err
    by_hand = {}
    for name in ("high", "low"):
        dit = load_dit(files[name], dtype=torch.float32)
        apply_lora(dit, files["lora"], strength=0.8)
        by_hand[name] = tmp_path / f"merged_{name}_noise.safetensors"
        _save(dit, by_hand[name])
    _run(capsys, by_hand["high"], by_hand["low"], tmp_path / "hand", *common)
    _run(capsys, files["high"], files["low"], tmp_path / "plain", *common)
    with_lora, hand, plain = (_frames(tmp_path / n) for n in ("lora", "hand", "plain"))
    assert with_lora.shape == (5, 48, 64, 3)
    assert np.array_equal(with_lora, hand)
    assert not np.array_equal(with_lora, plain)
    assert read_metadata(tmp_path / "lora")["loras"] == ["style.safetensors:0.8"]


def test_one_expert_loras_equal_merging_by_hand(files, tmp_path, capsys):
    """--lora-high / --lora-low (a Wan 2.2 LoRA pair) patch one expert each: the video equals the LoRAs merged by
    hand into that expert's file only; the metadata records them per expert."""
    from wan_core import apply_lora, load_dit

    common = ["--vae", str(files["vae"]), "--text-encoder", str(files["te"])]
    err = _run(capsys, files["high"], files["low"], tmp_path / "pair", *common, "--lora-high", f"{files['lora']}:0.8",
               "--lora-low", f"{files['lora']}:-0.5")
    assert err.count("LoRA style.safetensors") == 2
    assert "high-noise expert: LoRA style.safetensors (official layout) at strength 0.8" in err
    assert "low-noise expert: LoRA style.safetensors (official layout) at strength -0.5" in err
    by_hand = {}
    for name, strength in (("high", 0.8), ("low", -0.5)):
        dit = load_dit(files[name], dtype=torch.float32)
        apply_lora(dit, files["lora"], strength=strength)
        by_hand[name] = tmp_path / f"merged_{name}_noise.safetensors"
        _save(dit, by_hand[name])
    _run(capsys, by_hand["high"], by_hand["low"], tmp_path / "hand", *common)
    assert np.array_equal(_frames(tmp_path / "pair"), _frames(tmp_path / "hand"))
    meta = read_metadata(tmp_path / "pair")
    assert meta["loras"] == [] and meta["loras_high"] == ["style.safetensors:0.8"]
    assert meta["loras_low"] == ["style.safetensors:-0.5"]


def _tiny_moe(seed: int):
    from wan_core.dit.moe import WanMoE

    dit = tiny_random_models(seed=seed)[0]
    low = copy.deepcopy(dit)
    with torch.no_grad():
        for p in low.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return WanMoE(dit, low, boundary=0.875, guidance=(4.0, 3.0), offload_device="cpu")


@pytest.mark.parametrize("blocks, prefetch", [(1, 0), (2, 1)])
def test_block_swap_on_each_expert_same_latents(blocks, prefetch):
    """``placement.swap_experts`` (what --blocks-to-swap does on a GPU), the CPU standing in for both devices: each
    expert streams its swapped blocks (at most prefetch + 1 resident), the latents equal the unswapped run's."""
    from wan_core.pipeline import GenerationConfig, WanPipeline
    from wan_core.cli.placement import swap_experts

    moe = _tiny_moe(5)
    plain = copy.deepcopy(moe)
    text_dim = moe.config.text_dim
    g = torch.Generator().manual_seed(2)
    cond, uncond = [torch.randn(5, text_dim, generator=g)], [torch.randn(3, text_dim, generator=g)]
    cfg = GenerationConfig(width=32, height=32, frames=5, steps=6, shift=12.0, seed=1)
    swaps = swap_experts(moe, blocks, prefetch, torch.device("cpu"))
    with torch.no_grad():
        ref = WanPipeline(plain).sample_latents(cond, uncond, cfg)
        pipe = WanPipeline(moe)
        out = pipe.sample_latents(cond, uncond, cfg)
    assert {"high", "low"} <= set(pipe.moe_steps)
    assert torch.equal(out, ref)
    for swap in swaps:
        assert len(swap.swapped) == blocks and swap.stats.loads > 0
        assert swap.stats.max_resident <= prefetch + 1


def test_i2v_a14b_experts_from_the_command_line(files, tmp_path, capsys):
    """--image with two 36-channel experts without CLIP (Wan 2.2 I2V-A14B): the video is written with the official
    I2V-A14B shift 5 and guidance 3.5 (Wan2.2 wan/configs/wan_i2v_A14B.py, wan_core.variants)."""
    out = tmp_path / "i2v.webp"
    err = _run(capsys, files["i2v_high"], files["i2v_low"], out, "--vae", str(files["vae"]), "--text-encoder",
               str(files["te"]), "--image", str(files["image"]))
    assert "high-noise expert" in err and "low-noise expert" in err
    meta = read_metadata(out)
    assert meta["frames"] == 5 and meta["fps"] == 16 and meta["shift"] == 5.0 and meta["guidance"] == 3.5


def test_i2v_a14b_settings_follow_the_image():
    from wan_core.cli.parser import build_parser
    from wan_core.cli.request import resolve
    from wan_core.variants import I2V_A14B, T2V_A14B

    def request(*flags):
        return resolve(build_parser().parse_args(["generate", "--prompt", "x", "--out", "x.mp4", "--dit-high", "h",
                                                  "--dit-low", "l", *flags]))

    i2v = request("--image", "start.png")
    assert (i2v.boundary, i2v.guidance_low) == (I2V_A14B.boundary, I2V_A14B.guidance_low)
    assert i2v.shift == 5.0 and i2v.guidance == 3.5
    t2v = request()
    assert (t2v.boundary, t2v.guidance_low) == (T2V_A14B.boundary, T2V_A14B.guidance_low) and t2v.shift == 12.0


@pytest.mark.parametrize("flags, message", [
    (["--dit-high", "{high}", "--dit-low", "{low}", "--image", "{image}"], "not an image-to-video model"),
    (["--dit-high", "{i2v_high}", "--dit-low", "{i2v_low}", "--image", "{image}", "--last-image", "{image}"],
     "--last-image with --dit-high/--dit-low"),
    (["--dit-high", "{i2v_high}", "--dit-low", "{low}", "--image", "{image}"], "differ in latent channels in"),
    (["--dit", "{high}", "--lora-low", "{lora}"], "--lora-low applies to one of the two A14B experts"),
    (["--dit-high", "{low}", "--dit-low", "{high}"], "is the low-noise expert and --dit-low"),
    (["--dit-high", "{low}", "--dit-low", "{wide_low}"], "--dit-high {low} is named as the low-noise expert"),
    (["--dit-high", "{high}", "--dit-low", "{wide_low}"], "differ in width (64 vs 128)"),
    (["--dit-high", "{high}", "--dit-low", "{low}", "--lora-high", "missing.safetensors"],
     "--lora-high missing.safetensors: no such file"),
])
def test_bad_expert_requests_one_line(files, tmp_path, capsys, flags, message):
    args = [f.format(**{k: str(v) for k, v in files.items()}) for f in flags]
    code = main(["generate", *args, "--vae", str(files["vae"]), "--text-encoder", str(files["te"]), "--prompt", "x",
                 "--out", str(tmp_path / "x.webp"), *SIZE])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert code == 2 and len(err) == 1, err
    assert message.format(**{k: str(v) for k, v in files.items()}) in err[0], err


def test_move_and_release_of_swapped_experts():
    """A ``WanMoE`` whose experts swap blocks moves each expert's resident parts only ('meta' standing in for the
    GPU, as tests/memory/test_offload.py does), and ``release`` drops both swaps with the weights."""
    from wan_core.memory.offload import move, release, resident_parts
    from wan_core.cli.placement import swap_experts

    moe = _tiny_moe(6)
    swaps = swap_experts(moe, 1, 1, torch.device("cpu"))
    parts = resident_parts(moe)
    swapped = [p for s in swaps for i in s.swapped for p in s.model.blocks[i].parameters()]
    assert not {id(p) for m in parts for p in m.parameters()} & {id(p) for p in swapped}
    move(moe, "meta")
    assert moe.high_noise.patch_embedding.weight.is_meta and moe.low_noise.blocks[0].ffn[0].weight.is_meta
    assert all(not p.is_meta for p in swapped)
    release(moe)
    assert all(p.is_meta for p in moe.parameters())
    assert getattr(moe.high_noise, "block_swap", None) is None and getattr(moe.low_noise, "block_swap", None) is None
