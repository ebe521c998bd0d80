"""Clear errors: frame counts, sizes, channels, and files that are not a Wan 2.1 VAE."""
from __future__ import annotations

import pytest
import torch
from vae_testlib import rand_latents, rand_video

from wan_core.checkpoint import CheckpointError
from wan_core.vae import load_vae
from wan_core.vae.loader import nearest_valid_frames


@pytest.mark.parametrize("frames, near", [(80, "77 or 81"), (2, "1 or 5"), (16, "13 or 17"), (0, "1")])
def test_frame_count_must_be_4n_plus_1(vae, frames, near):
    with pytest.raises(ValueError, match=rf"4n\+1 frames .*got {frames} frames, nearest valid: {near}$"):
        vae.encode(torch.zeros(1, 3, frames, 16, 16))


def test_nearest_valid_frames():
    assert nearest_valid_frames(80) == (77, 81)
    assert nearest_valid_frames(82) == (81, 85)
    assert nearest_valid_frames(81) == (81,)
    assert nearest_valid_frames(0) == (1,)


def test_size_must_be_multiple_of_8(vae):
    with pytest.raises(ValueError, match=r"height 30 and width 44 must be multiples of 8 \(nearest valid: "
                                         r"height 24, width 40\)"):
        vae.encode(rand_video(5, 30, 44))
    with pytest.raises(ValueError, match="width 4 must be multiples of 8"):
        vae.encode(rand_video(1, 16, 4))


def test_wrong_channel_counts(vae):
    with pytest.raises(ValueError, match=r"expects 3 channels \(RGB\) in dim 1.*got 4"):
        vae.encode(torch.zeros(1, 4, 5, 16, 16))
    with pytest.raises(ValueError, match="channels-last"):
        vae.encode(torch.zeros(1, 16, 5, 16, 3))
    with pytest.raises(ValueError, match=r"IMAGE \[T, H, W, 3\].*image_to_video"):
        vae.encode(torch.zeros(5, 16, 16, 3))
    with pytest.raises(ValueError, match="decodes 16-channel latents, got 48 channels.*Wan 2.2"):
        vae.decode(rand_latents(2, 2, 2, channels=48))
    with pytest.raises(ValueError, match=r"5-D latents \[B, 16, T, H, W\]"):
        vae.decode(torch.zeros(16, 2, 2, 2))
    with pytest.raises(TypeError, match="floating-point"):
        vae.encode(torch.zeros(1, 3, 5, 16, 16, dtype=torch.uint8))


def _sd_vae_keys():
    """A (tiny) Stable Diffusion image VAE state dict in its original naming."""
    return {
        "encoder.conv_in.weight": torch.zeros(4, 3, 3, 3),
        "encoder.down.0.block.0.norm1.weight": torch.zeros(4),
        "encoder.down.0.block.0.conv1.weight": torch.zeros(4, 4, 3, 3),
        "decoder.up.0.block.0.conv1.weight": torch.zeros(4, 4, 3, 3),
        "quant_conv.weight": torch.zeros(8, 8, 1, 1),
        "post_quant_conv.weight": torch.zeros(4, 4, 1, 1),
    }


def test_stable_diffusion_vae_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="not a Wan 2.1 VAE; this file looks like a Stable Diffusion image VAE"):
        load_vae(_sd_vae_keys())
    from safetensors.torch import save_file

    path = tmp_path / "sd_checkpoint.safetensors"
    save_file({f"first_stage_model.{k}": v for k, v in _sd_vae_keys().items()}
              | {"model.diffusion_model.input_blocks.0.0.weight": torch.zeros(4, 4, 3, 3)}, str(path))
    with pytest.raises(CheckpointError, match=r"sd_checkpoint\.safetensors: not a Wan 2.1 VAE.*Stable Diffusion"):
        load_vae(path)


def test_wan_dit_given_to_the_vae_loader():
    sd = {"head.modulation": torch.zeros(1, 2, 8), "blocks.0.self_attn.q.weight": torch.zeros(8, 8)}
    with pytest.raises(CheckpointError, match="looks like a Wan 2.1 DiT"):
        load_vae(sd)


def test_mixed_latent_widths_are_refused(official_sd):
    """A Wan 2.1 layout whose latent convs claim 48 channels (the Wan 2.2 VAE loads: tests/vae/test_wan22.py)."""
    sd = dict(official_sd)
    sd["conv2.weight"] = torch.zeros(48, 48, 1, 1, 1)
    with pytest.raises(CheckpointError, match=r"shape mismatch.*conv2\.bias: expected \[48\], found \[16\]"):
        load_vae(sd)


def test_missing_and_mismatched_tensors_are_named(official_sd):
    sd = {k: v for k, v in official_sd.items() if k != "decoder.middle.1.proj.bias"}
    with pytest.raises(CheckpointError, match=r"1 missing key\(s\), e.g. decoder.middle.1.proj.bias"):
        load_vae(sd)
    sd = dict(official_sd)
    sd["decoder.head.2.bias"] = torch.zeros(4)
    with pytest.raises(CheckpointError, match=r"decoder.head.2.bias: expected \[3\], found \[4\]"):
        load_vae(sd)
    sd = dict(official_sd)
    sd["decoder.extra.weight"] = torch.zeros(1)
    with pytest.raises(CheckpointError, match=r"unexpected key\(s\), e.g. decoder.extra.weight"):
        load_vae(sd)
