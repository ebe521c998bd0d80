"""NAG (wan_core.sampling.nag; Chen et al., arXiv 2505.21179): the formula against a hand computation on small
tensors, the DiT with NAG against an independent per-layer reference, scale 1 = no NAG exactly, and a
guidance-1 run that differs from plain sampling and stays finite (docs/lora.md section 6)."""
from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F

from wan_core.dit.attention import heads_first, heads_last
from wan_core.sampling.nag import NAGAttention, NAGConfig, nag_combine

from ..lora.helpers import CFG


def hand_nag(zp: torch.Tensor, zn: torch.Tensor, s: float, tau: float, alpha: float) -> torch.Tensor:
    """Element by element in float64: extrapolate, L1 ratio per token, clamp at tau, blend."""
    out = torch.empty(zp.shape, dtype=torch.float64)
    for idx in range(zp.shape[0] * zp.shape[1]):
        i, j = divmod(idx, zp.shape[1])
        p, n = zp[i, j].double(), zn[i, j].double()
        g = [s * p[c] - (s - 1) * n[c] for c in range(len(p))]
        r = sum(abs(x) for x in g) / sum(abs(x) for x in p)
        factor = min(r, tau) / r
        out[i, j] = torch.stack([alpha * g[c] * factor + (1 - alpha) * p[c] for c in range(len(p))])
    return out


@pytest.mark.parametrize("scale, tau, alpha", [(11.0, 2.5, 0.25), (3.0, 100.0, 0.5), (5.0, 1.2, 1.0)])
def test_formula_matches_hand_computation(scale, tau, alpha):
    g = torch.Generator().manual_seed(0)
    zp, zn = torch.randn(2, 3, 5, generator=g), torch.randn(2, 3, 5, generator=g)
    got = nag_combine(zp, zn, NAGConfig(scale, tau, alpha))
    torch.testing.assert_close(got.double(), hand_nag(zp, zn, scale, tau, alpha), rtol=1e-5, atol=1e-6)


def test_config_is_checked():
    for bad in ({"scale": 0.5}, {"tau": 0.0}, {"alpha": 1.5}, {"scale": float("nan")}):
        with pytest.raises(ValueError, match="NAG"):
            NAGConfig(**bad)


def tiny_dit(seed: int = 0):
    from wan_core.dit.model import WanDiT

    torch.manual_seed(seed)
    dit = WanDiT(CFG).eval()
    with torch.no_grad():
        for p in dit.parameters():
            p.normal_(0, 0.2)
    return dit


def inputs():
    g = torch.Generator().manual_seed(3)
    return (torch.randn(1, 16, 2, 4, 4, generator=g), torch.tensor([700.0]),
            [torch.randn(5, CFG.text_dim, generator=g)], [torch.randn(9, CFG.text_dim, generator=g)])


def test_dit_with_nag_matches_an_independent_per_layer_reference():
    dit = tiny_dit()
    x, t, ctx, neg = inputs()
    config = NAGConfig(11.0, 2.5, 0.25)
    with torch.no_grad(), NAGAttention(dit, neg, config):
        got = dit(x, t, ctx)
    neg_ctx = dit.embed_text(neg, 1).detach()

    def reference_forward(self, h, c, attn, layer):
        n = self.num_heads
        q = heads_first(self.norm_q(self.q(h)), n)
        k, v = self.text_kv(c)
        kn, vn = self.text_kv(neg_ctx)
        zp = heads_last(F.scaled_dot_product_attention(q, k, v))
        zn = heads_last(F.scaled_dot_product_attention(q, kn, vn))
        return self.o(hand_nag(zp, zn, 11.0, 2.5, 0.25).float())

    for block in dit.blocks:
        block.cross_attn.forward = types.MethodType(reference_forward, block.cross_attn)
    with torch.no_grad():
        expected = dit(x, t, ctx)
    assert ((got - expected).abs().max() / expected.abs().max()).item() <= 1e-5


def test_scale_one_is_no_nag_exactly_and_hooks_are_removed():
    dit = tiny_dit()
    x, t, ctx, neg = inputs()
    with torch.no_grad():
        plain = dit(x, t, ctx)
        with NAGAttention(dit, neg, NAGConfig(scale=1.0)):
            same = dit(x, t, ctx)
        with NAGAttention(dit, neg, NAGConfig()):
            guided = dit(x, t, ctx)
        after = dit(x, t, ctx)
    assert torch.equal(same, plain) and torch.equal(after, plain)
    assert torch.isfinite(guided).all() and not torch.allclose(guided, plain, atol=1e-3)


def test_guidance_one_sampling_with_nag_differs_and_stays_finite():
    from wan_core.demo import tiny_random_models
    from wan_core.pipeline import GenerationConfig, WanPipeline
    from wan_core.sampling import distill_sigmas

    dit, vae, te = tiny_random_models(seed=0)
    pipe = WanPipeline(dit, vae, te)
    cfg = GenerationConfig(prompt="a fox", width=64, height=48, frames=5, steps=4, guidance=1.0, solver="euler",
                           convention="custom", sigmas=tuple(distill_sigmas(4, 5.0)))
    with torch.inference_mode():
        cond, neg = pipe.encode_prompts(cfg.prompts, "blurry, static", need_negative=True)
        plain = pipe.sample_latents(cond, None, cfg)
        with NAGAttention(dit, neg, NAGConfig(scale=1.0)):
            off = pipe.sample_latents(cond, None, cfg)
        with NAGAttention(dit, neg, NAGConfig()):
            nag = pipe.sample_latents(cond, None, cfg)
    assert torch.equal(off, plain)
    assert torch.isfinite(nag).all() and not torch.allclose(nag, plain, atol=1e-4)
