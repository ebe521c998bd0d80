"""Tail initialization (docs/algorithms.md section 1.4): an inflated causal Conv3d reproduces Conv2d frame by frame.

Reference: F.conv2d applied to each frame; the causal 3D conv is written here (kt-1 frames of padding in
front, replicas of frame 0 or zeros), independent of the package's VAE.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from wan_core.train.tail_init import inflate_conv2d_weight, inflate_state_dict


def causal_conv3d(x, w, b, pad_hw, front="replicate"):
    """x [B, C, T, H, W]; kt-1 frames in front (copies of frame 0 or zeros), spatial zero padding."""
    kt = w.shape[2]
    first = x[:, :, :1].expand(-1, -1, kt - 1, -1, -1)
    pad = first if front == "replicate" else torch.zeros_like(first)
    return F.conv3d(torch.cat([pad, x], dim=2), w, b, padding=(0, pad_hw, pad_hw))


def per_frame(x, w2, b, pad_hw):
    return torch.stack([F.conv2d(x[:, :, t], w2, b, padding=pad_hw) for t in range(x.shape[2])], dim=2)


@pytest.mark.parametrize("front", ["replicate", "zeros"])
@pytest.mark.parametrize("kt", [2, 3, 4])
def test_tail_inflation_reproduces_conv2d_per_frame(kt, front):
    g = torch.Generator().manual_seed(kt)
    w2 = torch.randn(5, 3, 3, 3, generator=g, dtype=torch.float64)
    b = torch.randn(5, generator=g, dtype=torch.float64)
    x = torch.randn(2, 3, 6, 8, 7, generator=g, dtype=torch.float64)
    w3 = inflate_conv2d_weight(w2, kt, "tail")
    assert w3.shape == (5, 3, kt, 3, 3)
    got = causal_conv3d(x, w3, b, 1, front)
    assert torch.allclose(got, per_frame(x, w2, b, 1), atol=1e-12)


def test_center_and_average_modes():
    g = torch.Generator().manual_seed(0)
    w2 = torch.randn(4, 2, 3, 3, generator=g, dtype=torch.float64)
    b = torch.randn(4, generator=g, dtype=torch.float64)
    x = torch.randn(1, 2, 7, 5, 5, generator=g, dtype=torch.float64)
    kt = 3
    frames = per_frame(x, w2, None, 1)                  # bias-free conv2d of each frame
    # center: output t = conv2d(frame t - 1), frame -1 = replica of frame 0
    got = causal_conv3d(x, inflate_conv2d_weight(w2, kt, "center"), b, 1)
    shifted = torch.cat([frames[:, :, :1], frames[:, :, :-1]], dim=2)
    assert torch.allclose(got, shifted + b.view(1, -1, 1, 1, 1), atol=1e-12)
    # average: output t = bias + mean of conv2d over frames t-2..t (clamped at 0)
    got = causal_conv3d(x, inflate_conv2d_weight(w2, kt, "average"), b, 1)
    idx = [[max(s, 0) for s in range(t - kt + 1, t + 1)] for t in range(7)]
    ref = torch.stack([frames[:, :, i].mean(dim=2) for i in idx], dim=2) + b.view(1, -1, 1, 1, 1)
    assert torch.allclose(got, ref, atol=1e-12)
    # tail mode with kt > 1 is *not* the average: the modes differ
    assert not torch.allclose(inflate_conv2d_weight(w2, kt, "tail"), inflate_conv2d_weight(w2, kt, "average"))
    with pytest.raises(ValueError, match="mode"):
        inflate_conv2d_weight(w2, 3, "middle")
    with pytest.raises(ValueError, match="Conv2d weight"):
        inflate_conv2d_weight(w2[0], 3)


class Image2D(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = nn.Conv2d(3, 8, 3, padding=1)
        self.mid = nn.Conv2d(8, 8, 3, padding=1)
        self.proj = nn.Linear(8, 8)                       # attention-style projection on channels
        self.extra = nn.Conv2d(8, 8, 5, padding=2)        # 5x5 here, 3x3x3 in the video model: skipped
        self.conv_out = nn.Conv2d(8, 4, 1)

    def forward(self, x):                                 # x [B, 3, H, W]
        h = F.silu(self.conv_in(x))
        h = F.silu(self.mid(h))
        h = h + self.proj(h.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.conv_out(h)


class CausalConv3d(nn.Conv3d):
    def forward(self, x):
        return causal_conv3d(x, self.weight, self.bias, self.kernel_size[1] // 2)


class Video3D(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = CausalConv3d(3, 8, 3)
        self.mid = CausalConv3d(8, 8, (4, 3, 3))
        self.proj = CausalConv3d(8, 8, 1)
        self.extra = CausalConv3d(8, 8, 3)
        self.conv_out = CausalConv3d(8, 4, 1)
        self.new_gate = nn.Parameter(torch.full((1,), 0.25))   # no 2D counterpart

    def forward(self, x, use_extra=False):                # x [B, 3, T, H, W]
        h = F.silu(self.conv_in(x))
        h = F.silu(self.mid(h))
        h = h + self.proj(h)
        if use_extra:
            h = h + self.extra(h)
        return self.conv_out(h)


def test_whole_state_dict_inflation_and_report():
    torch.manual_seed(0)
    image, video = Image2D().double(), Video3D().double()
    sd, report = inflate_state_dict(image.state_dict(), video, mode="tail")
    video.load_state_dict(sd)
    x = torch.randn(2, 3, 5, 6, 6, dtype=torch.float64)
    ref = torch.stack([image(x[:, :, t]) for t in range(5)], dim=2)
    assert torch.allclose(video(x), ref, atol=1e-12)       # the untrained video model = image model per frame
    inflated = {k for k, *_ in report.inflated}
    assert inflated == {"conv_in.weight", "mid.weight", "proj.weight", "conv_out.weight"}
    assert {k for k, _ in report.copied} == {"conv_in.bias", "mid.bias", "proj.bias", "conv_out.bias",
                                             "extra.bias"}
    skipped = dict(report.skipped)
    assert set(skipped) == {"extra.weight", "new_gate"}
    assert "(8, 8, 3, 3, 3)" in skipped["extra.weight"] and "no source" in skipped["new_gate"]
    assert torch.equal(sd["new_gate"], torch.full((1,), 0.25, dtype=torch.float64))
    assert report.unused == ["extra.weight"]
    assert "skipped extra.weight" in report.summary()


def test_key_map_renames():
    image = Image2D()
    sd, report = inflate_state_dict({"encoder." + k: v for k, v in image.state_dict().items()}, Video3D(),
                                    key_map=lambda k: "encoder." + k)
    assert len(report.inflated) == 4 and torch.equal(sd["conv_in.bias"], image.conv_in.bias.detach())
