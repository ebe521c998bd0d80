"""The Python API exactly as README.md shows it, on the tiny random models (keeps the README true)."""
import torch

import wan_core
from wan_core.demo import tiny_random_models
from wan_core.pipeline import GenerationConfig, WanPipeline


def test_readme_pipeline_and_pieces():
    dit, vae, te = tiny_random_models(seed=1)
    result = WanPipeline(dit, vae, te)(GenerationConfig(prompt="a cat walking in the snow", seed=42, width=64,
                                                        height=48, frames=5, steps=2))
    assert result.video.shape == (1, 3, 5, 48, 64) and result.latents.shape == (1, 16, 2, 6, 8)
    assert result.video.abs().max() <= 1.0
    embs = te.encode(["a prompt", ""])
    assert [e.shape[1] for e in embs] == [te.text_dim] * 2 and embs[1].shape[0] == 1  # "" = EOS only
    with torch.no_grad():
        v = dit(torch.randn(1, 16, 2, 6, 8), torch.tensor([999]), embs[:1])
    assert v.shape == (1, 16, 2, 6, 8)
    z = vae.encode(result.video)
    assert z.shape == (1, 16, 2, 6, 8)
    seen = []
    frames = vae.decode(z, tiling="on", tile=4, overlap=2, progress=lambda done, total: seen.append((done, total)))
    assert frames.shape == result.video.shape and seen and seen[-1][0] == seen[-1][1]
    assert wan_core.load_dit is not None and wan_core.DEFAULT_NEGATIVE_PROMPT
