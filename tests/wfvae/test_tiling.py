"""2x2-tile decode (the default 32-latent tiles, overlap 8) of the official tiny WF-VAEs against the whole-frame
decode: within the bound docs/wfvae.md section 3 documents, and exact away from the seams once the decoder's
global per-frame attention is switched off (so the error is the model's reach across tile edges, not the blend)."""
from __future__ import annotations

import pytest
import torch

import wan_core
from wan_core.vae.tiling import tile_grid

from .test_parity import official

# docs/wfvae.md section 3: the largest relative L2 error measured (18 cases per structure) times ~1.2
BOUND = {"4x8x8": 0.31, "8x8x8": 0.45}
GRID = 40  # latents: two 32-latent tiles per side with the default overlap of 8


def decode_both(vae, z):
    return vae.decode(z, tiling="off"), vae.decode(z, tiling="on")


@pytest.mark.parametrize("structure", ["4x8x8", "8x8x8"])
def test_2x2_tiles_within_the_documented_bound(structure):
    vae = wan_core.load_vae(official(structure)[0])
    rows, cols = tile_grid(GRID, GRID, vae.default_tile, vae.default_overlap)
    assert len(rows) == len(cols) == 2
    z = torch.randn(1, 4, 1, GRID, GRID, generator=torch.Generator().manual_seed(0))
    whole, tiled = decode_both(vae, z)
    rel = float((tiled - whole).norm() / whole.norm())
    assert 0.01 < rel <= BOUND[structure]  # tiles do differ (a tiling that silently did nothing would pass 0)


def test_blend_is_exact_where_one_tile_covers_and_the_model_is_local():
    vae = wan_core.load_vae(official("4x8x8")[0])
    with torch.no_grad():
        vae.model.decoder.mid[1].proj_out.conv.weight.zero_()  # the per-frame attention adds only its bias
    z = torch.randn(1, 4, 1, GRID, GRID, generator=torch.Generator().manual_seed(1))
    whole, tiled = decode_both(vae, z)
    diff = (tiled - whole).abs()[0].amax(dim=(0, 1))  # [320, 320]
    # pixels < 64 (8 latents) from the frame's corner are only tile 0's, > 8 latents from its far edges
    assert float(diff[:64, :64].max()) <= 1e-3 and float(diff[-64:, -64:].max()) <= 1e-3  # the reach fades
    assert float(diff[64:256, 64:256].max()) > 0.1  # the overlap bands: the model's reach beyond a tile edge
