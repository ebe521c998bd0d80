"""SUV skip connections (docs/algorithms.md section 1.2): stage table, LIFO skips, [I | 0] fusion = dense model at
init."""
import copy

import pytest
import torch
from torch import nn

from wan_core.train.suv import (SUV_RELEASE_LAYERS, SUV_RELEASE_SPARSE_N, SkipFusion, SUVBlocks,
                                block_sparse_mode, suv_stage_table)


def test_release_stage_table():
    table = suv_stage_table(SUV_RELEASE_LAYERS, SUV_RELEASE_SPARSE_N)
    assert [s.start for s in table] == [0, 2, 6, 12, 20, 26, 30] and table[-1].stop == 32
    assert [s.role for s in table] == ["encoder"] * 3 + ["mid"] + ["decoder"] * 3
    assert [s.skip_from for s in table] == [None, None, None, None, 2, 1, 0]
    assert [s.sparse_k for s in table] == [1, 2, 4, 8, 4, 2, 1]
    assert [block_sparse_mode(j, 4) for j in range(4)] == ["single", "group", "single", "group"]
    assert block_sparse_mode(1, 1) == "dense"


@pytest.mark.parametrize("layers,sparse,match", [
    ([2, 2], None, "odd number of stages"),
    ([2, 3, 2], None, "even number of blocks"),
    ([2, 2, 2], [1, 2, 2], "sparse ratios"),
    ([2, 2, 2], [1, 1], "entries"),
])
def test_stage_table_rejects(layers, sparse, match):
    with pytest.raises(ValueError, match=match):
        suv_stage_table(layers, sparse)


def test_skip_fusion_zero_init_is_exact_identity():
    f = SkipFusion(16)
    h, s = torch.randn(2, 5, 16), torch.randn(2, 5, 16) * 100
    assert torch.equal(f(h, s), h)
    assert torch.equal(f.proj.weight[:, :16], torch.eye(16)) and not f.proj.weight[:, 16:].any()
    normed = SkipFusion(16, zero_init=False)
    assert isinstance(normed.norm, nn.LayerNorm) and not torch.allclose(normed(h, s), normed(h, s * 0))


class ResidualMLP(nn.Module):
    def __init__(self, dim, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.fc = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.film = nn.Linear(4, dim)

    def forward(self, h, cond):                          # h [B, L, D], cond [B, 4]
        return h + self.fc(h) * torch.sigmoid(self.film(cond))[:, None]


def test_suv_blocks_equal_dense_at_init():
    dim = 12
    blocks = nn.ModuleList(ResidualMLP(dim, i) for i in range(10))
    suv = SUVBlocks(blocks, dim, [2, 2, 2, 2, 2], [1, 2, 4, 2, 1])
    h, cond = torch.randn(3, 7, dim), torch.randn(3, 4)
    dense = h
    for b in blocks:
        dense = b(dense, cond)
    assert torch.equal(suv(h, cond), dense)
    assert [info[1] for info in suv.block_info] == [1, 1, 2, 2, 4, 4, 2, 2, 1, 1]
    assert len(suv.fusions) == 2
    # the variant is trainable: the skip half of each fusion gets gradients although it starts at 0
    suv(h, cond).square().sum().backward()
    assert all(f.proj.weight.grad[:, dim:].abs().sum() > 0 for f in suv.fusions)


class AddConst(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c

    def forward(self, h):
        return h + self.c


def test_skips_are_lifo():
    # blocks add 1, 10, 100, ...; fusions set to [0 | I] take only the skip, so each decoder stage
    # restarts from the matching encoder stage's output (stage S-1-i <- stage i)
    layers = [2, 2, 2, 2, 2]
    consts = [10.0 ** i for i in range(10)]
    suv = SUVBlocks([AddConst(c) for c in consts], 1, layers)
    for f in suv.fusions:
        with torch.no_grad():
            f.proj.weight.copy_(torch.tensor([[0.0, 1.0]]))
    h0 = torch.zeros(1, 1, 1, dtype=torch.float64)
    suv = suv.double()
    # by hand: encoder outputs after stage 0: 1+10 = 11, after stage 1: 11+100+1000 = 1111;
    # mid adds 1e4 + 1e5; decoder stage 3 restarts from 1111 (+1e6 + 1e7), stage 4 from 11 (+1e8 + 1e9)
    with torch.no_grad():
        assert float(suv(h0)) == 11 + 1e8 + 1e9


def test_suv_wan_dit_equals_dense_at_init():
    model_mod = pytest.importorskip("wan_core.dit.model")
    from wan_core.config import dit_preset
    from wan_core.train.suv_dit import SUVWanDiT

    cfg = dit_preset("tiny").replace(num_layers=6)
    torch.manual_seed(0)
    dense = model_mod.WanDiT(cfg).eval()
    suv = SUVWanDiT.from_dense(copy.deepcopy(dense), [2, 2, 2], [1, 2, 1]).eval()
    x = torch.randn(2, 16, 2, 4, 4)
    t = torch.tensor([900.0, 37.0])
    ctx = [torch.randn(5, cfg.text_dim), torch.randn(9, cfg.text_dim)]
    with torch.no_grad():
        ref = dense(x, t, ctx)
        assert torch.equal(suv(x, t, ctx), ref)
        extra = set(suv.state_dict()) - set(dense.state_dict())
        assert extra == {"skip_fusions.0.proj.weight", "skip_fusions.0.proj.bias"}
        assert [i[2] for i in suv.block_info] == ["dense", "dense", "single", "group", "dense", "dense"]
        suv.skip_fusions[0].proj.weight[:, cfg.dim:].normal_()    # once the skip is used, it matters
        assert not torch.allclose(suv(x, t, ctx), ref)
    with pytest.raises(ValueError, match="covers 10 blocks"):
        SUVWanDiT(cfg, [2, 2, 2, 2, 2])


def test_suv_wan_dit_deepcopy_and_training_step():
    model_mod = pytest.importorskip("wan_core.dit.model")
    from wan_core.config import dit_preset
    from wan_core.train.suv_dit import SUVWanDiT

    cfg = dit_preset("tiny").replace(num_layers=6)
    torch.manual_seed(1)
    suv = SUVWanDiT.from_dense(model_mod.WanDiT(cfg), [2, 2, 2])
    twin = copy.deepcopy(suv)                             # hooks re-bind to the copy
    x, t, ctx = torch.randn(1, 16, 1, 4, 4), torch.tensor([500.0]), torch.randn(1, 3, cfg.text_dim)
    with torch.no_grad():
        twin.skip_fusions[0].proj.weight[:, cfg.dim:].normal_()
        assert not torch.allclose(twin(x, t, ctx), suv(x, t, ctx))
    suv(x, t, ctx).square().mean().backward()
    assert suv.skip_fusions[0].proj.weight.grad[:, cfg.dim:].abs().sum() > 0
    with pytest.raises(RuntimeError, match="outside SUVWanDiT.forward"):
        suv.blocks[4](torch.zeros(1, 4, cfg.dim), None, None, None, None, 4)   # a fusing block
