"""Inflate 2D convolution kernels into causal 3D ones ("tail initialization", Open-Sora Plan CausalVideoVAE).

Implements docs/algorithms.md section 1.4: the 2D kernel goes into the last temporal tap (tail), the middle one
(center) or is spread evenly (average); and a whole 2D image-VAE state dict into a causal video VAE's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Literal, Mapping, Optional, Tuple, Union, get_args

import torch

__all__ = ["inflate_conv2d_weight", "inflate_state_dict", "InflationReport", "INFLATE_MODES", "InflateMode"]

InflateMode = Literal["tail", "center", "average"]
INFLATE_MODES: Tuple[str, ...] = get_args(InflateMode)


def inflate_conv2d_weight(weight: torch.Tensor, kt: int, mode: InflateMode = "tail") -> torch.Tensor:
    """Turn a Conv2d weight [Co, Ci, kh, kw] into a Conv3d weight [Co, Ci, kt, kh, kw].

    * ``tail``: zeros except tap ``kt-1`` = W2. With causal padding (the kt-1 frames before a frame are
      earlier frames or padding) tap kt-1 meets the current frame, so output frame t = conv2d(frame t).
    * ``center``: zeros except tap ``(kt-1)//2`` = W2 (output frame t = conv2d(frame t - (kt-1)//2)).
    * ``average``: W2 / kt in every tap (output = bias + mean over the window of the bias-free conv2d).
    The bias (if any) is copied unchanged by the caller.
    """
    if weight.dim() != 4:
        raise ValueError(f"expected a Conv2d weight [Co, Ci, kh, kw], got shape {tuple(weight.shape)}")
    if kt < 1:
        raise ValueError(f"temporal kernel size must be >= 1, got {kt}")
    if mode not in INFLATE_MODES:
        raise ValueError(f"mode must be one of {INFLATE_MODES}, got {mode!r}")
    co, ci, kh, kw = weight.shape
    if mode == "average":
        return (weight / kt).unsqueeze(2).repeat(1, 1, kt, 1, 1).contiguous()
    out = weight.new_zeros((co, ci, kt, kh, kw))
    tap = kt - 1 if mode == "tail" else (kt - 1) // 2
    out[:, :, tap] = weight
    return out


@dataclass
class InflationReport:
    """What :func:`inflate_state_dict` did with every target key.

    ``inflated``: (target key, source key, source shape, target shape) for 4-D -> 5-D kernels (and 2-D
    Linear weights -> 1x1(x1) convs); ``copied``: (target key, source key) for equal shapes;
    ``skipped``: (target key, reason) for keys left at their initial value; ``unused``: source keys no
    target key took.
    """

    inflated: List[Tuple[str, str, tuple, tuple]] = field(default_factory=list)
    copied: List[Tuple[str, str]] = field(default_factory=list)
    skipped: List[Tuple[str, str]] = field(default_factory=list)
    unused: List[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"inflated {len(self.inflated)}, copied {len(self.copied)}, skipped {len(self.skipped)}, "
                 f"unused source keys {len(self.unused)}"]
        lines += [f"  skipped {k}: {why}" for k, why in self.skipped]
        return "\n".join(lines)


def inflate_state_dict(
    source: Mapping[str, torch.Tensor],
    target: Union[Mapping[str, torch.Tensor], torch.nn.Module],
    *,
    mode: InflateMode = "tail",
    key_map: Union[Callable[[str], Optional[str]], Mapping[str, str], None] = None,
) -> Tuple[Dict[str, torch.Tensor], InflationReport]:
    """Initialise a causal video VAE's state dict from a 2D image VAE's, where shapes allow.

    source: the 2D model's state dict. target: the video model (or its state dict), giving the keys and
    shapes to fill. key_map: target key -> source key (callable returning None for "no source", or a dict;
    default: the same name). For each target key:

    * source tensor with the same shape -> copied (norms, biases, 1x1 kernels stored as 5-D on both sides);
    * target [Co, Ci, kt, kh, kw], source [Co, Ci, kh, kw] -> :func:`inflate_conv2d_weight` (``mode``);
    * target [Co, Ci, 1, 1, 1] or [Co, Ci, 1, 1], source Linear [Co, Ci] -> reshaped (counted as inflated);
    * anything else (missing source, other shape) -> the target's own value is kept, and the reason
      recorded in the report.

    Returns (new state dict with every target key, report). Load it with ``model.load_state_dict(sd)``.
    """
    if isinstance(target, torch.nn.Module):
        target = target.state_dict()
    if isinstance(key_map, Mapping):
        mapping = dict(key_map)
        key_map = mapping.get
    report = InflationReport()
    out: Dict[str, torch.Tensor] = {}
    used = set()
    for tkey, tval in target.items():
        skey = tkey if key_map is None else key_map(tkey)
        if skey is None or skey not in source:
            out[tkey] = tval.clone()
            report.skipped.append((tkey, "no source tensor" + ("" if skey is None else f" {skey!r}")))
            continue
        sval = source[skey]
        tshape, sshape = tuple(tval.shape), tuple(sval.shape)
        if tshape == sshape:
            out[tkey] = sval.detach().clone().to(tval.dtype)
            report.copied.append((tkey, skey))
        elif len(tshape) == 5 and len(sshape) == 4 and tshape[:2] + tshape[3:] == sshape:
            out[tkey] = inflate_conv2d_weight(sval.detach(), tshape[2], mode).to(tval.dtype)
            report.inflated.append((tkey, skey, sshape, tshape))
        elif len(sshape) == 2 and len(tshape) in (4, 5) and tshape[:2] == sshape and all(
                d == 1 for d in tshape[2:]):
            out[tkey] = sval.detach().reshape(tshape).clone().to(tval.dtype)
            report.inflated.append((tkey, skey, sshape, tshape))
        else:
            out[tkey] = tval.clone()
            report.skipped.append((tkey, f"shape {tshape} cannot take source {skey!r} of shape {sshape}"))
            continue
        used.add(skey)
    report.unused = [k for k in source if k not in used]
    return out, report
