"""The training-time twins of the VAE's in-place ops compute the same function and are restored."""
import torch

from wan_core.demo import randomize_
from wan_core.demo._trainable import autograd_safe_vae
from wan_core.vae import blocks
from wan_core.vae.config import TINY_VAE_1RES
from wan_core.vae.model import WanVAEModel


def test_out_of_place_forward_matches_the_inference_code_and_is_differentiable():
    torch.manual_seed(0)
    model = WanVAEModel(TINY_VAE_1RES).double()
    randomize_(model)
    x = torch.rand(1, 3, 5, 16, 16, dtype=torch.float64) * 2 - 1
    with torch.no_grad():
        ref = model.decode_full(model.encode_full(x))
    original = blocks.RMSNorm.forward
    with autograd_safe_vae():
        assert blocks.RMSNorm.forward is not original
        y = model.decoder(model.conv2(model.encode_chunk(x, None))).clamp(-1, 1)
        torch.testing.assert_close(y.detach(), ref, rtol=1e-9, atol=1e-9)
        y.square().mean().backward()  # the inference ops would raise here (in-place on saved tensors)
        with torch.no_grad():  # the inference fast paths still compute the same inside the block
            torch.testing.assert_close(model.decode_full(model.encode_full(x)), ref, rtol=1e-9, atol=1e-9)
    assert blocks.RMSNorm.forward is original
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
