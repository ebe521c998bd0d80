"""A Wan DiT with SUV long skip connections (U-shaped stages), initialised from a dense WanDiT.

Implements docs/algorithms.md section 1.2 on our ``WanDiT`` (docs/wan_spec.md section 2): same blocks and weights,
plus one [I | 0]-initialised fusion per decoder stage, so the variant starts equal to the dense model.
"""
from __future__ import annotations

import functools
from typing import List, Optional, Sequence

import torch
from torch import nn

from ..dit.model import WanDiT
from .suv import SkipFusion, block_sparse_mode, suv_stage_table

__all__ = ["SUVWanDiT"]


class SUVWanDiT(WanDiT):
    """``WanDiT`` whose blocks run in SUV stages with LIFO skips; forward ``(x, t, context) -> v`` unchanged.

    num_layers: blocks per stage (sum = ``config.num_layers``, odd number of stages, see
    :func:`suv_stage_table`); sparse_n: per-stage sparse ratio, recorded in ``self.stages`` /
    ``self.block_info`` for skiparse attention (attached through ``self.attention``, not applied here).

    The dense forward is reused unchanged: forward hooks push the hidden states [B, L, D] leaving each
    encoder stage's last block, forward pre-hooks fuse the newest one into the hidden states entering
    each decoder stage's first block (the blocks take and return the residual stream as their first
    argument). The skip stack exists only during one ``forward`` call.

    The state dict is the dense one plus ``skip_fusions.{j}.proj.{weight,bias}``. Keep the fusions float32
    like the residual stream (``model.skip_fusions.float()`` after casting the model): the [I | 0] start
    is then exact whatever the blocks' dtype.
    """

    def __init__(self, config, num_layers: Sequence[int], sparse_n: Optional[Sequence[int]] = None, *,
                 zero_init: bool = True, require_even: bool = True, attention=None):
        super().__init__(config, attention)
        self.stages = suv_stage_table(num_layers, sparse_n, require_even=require_even)
        if self.stages[-1].stop != config.num_layers:
            raise ValueError(f"stage table {list(num_layers)} covers {self.stages[-1].stop} blocks, the model "
                             f"has {config.num_layers}")
        self.skip_fusions = nn.ModuleList(
            SkipFusion(config.dim, zero_init=zero_init) for st in self.stages if st.role == "decoder")
        self.block_info = [(st.index, st.sparse_k, block_sparse_mode(j, st.sparse_k))
                           for st in self.stages for j in range(st.num_blocks)]
        self._skip_stack: Optional[List[torch.Tensor]] = None
        j = 0
        for st in self.stages:
            if st.role == "encoder":
                self.blocks[st.stop - 1].register_forward_hook(self._push_skip)
            elif st.role == "decoder":
                self.blocks[st.start].register_forward_pre_hook(functools.partial(self._fuse_skip, j),
                                                                with_kwargs=True)
                j += 1

    # ---- hooks (bound methods: deep copies of the model re-bind them to the copy)
    def _stack(self) -> List[torch.Tensor]:
        if self._skip_stack is None:
            raise RuntimeError("SUVWanDiT blocks were called outside SUVWanDiT.forward; the skip connections "
                               "only exist inside one forward call")
        return self._skip_stack

    def _push_skip(self, module, args, output):
        self._stack().append(output)

    def _fuse_skip(self, j, module, args, kwargs):
        if not args or not isinstance(args[0], torch.Tensor):
            raise RuntimeError("SUVWanDiT expects each block to take the hidden states [B, L, D] as its first "
                               "positional argument")
        h = args[0]
        fusion = self.skip_fusions[j]
        dtype = fusion.proj.weight.dtype
        fused = fusion(h.to(dtype), self._stack().pop().to(dtype)).to(h.dtype)
        return (fused, *args[1:]), kwargs

    def forward(self, x: torch.Tensor, t, context, image_latent: torch.Tensor | None = None,
                clip_tokens: torch.Tensor | None = None, vace_context=None, vace_scale: float = 1.0) -> torch.Tensor:
        """x ``[B, 16, F, H, W]``, t ``[B]`` or scalar on 0..1000, context ``[B, L, text_dim]`` or list -> v
        (``image_latent`` / ``clip_tokens``: as ``WanDiT.forward``, for image-to-video models; ``vace_context`` /
        ``vace_scale``: for VACE models)."""
        self._skip_stack = []
        try:
            out = super().forward(x, t, context, image_latent=image_latent, clip_tokens=clip_tokens,
                                  vace_context=vace_context, vace_scale=vace_scale)
            if self._skip_stack:
                raise RuntimeError(f"{len(self._skip_stack)} SUV skips were not consumed: the dense forward "
                                   "did not run every block once in order")
            return out
        finally:
            self._skip_stack = None

    @classmethod
    def from_dense(cls, dit: WanDiT, num_layers: Sequence[int], sparse_n: Optional[Sequence[int]] = None, *,
                   zero_init: bool = True, require_even: bool = True) -> "SUVWanDiT":
        """Build the SUV variant around a dense model's weights (shared, not copied: ``copy.deepcopy`` the
        dense model first to keep both independent). Built on the meta device, so no second full-size
        allocation; only the small fusions are new (float32, on the dense model's device)."""
        with torch.device("meta"):
            model = cls(dit.config, num_layers, sparse_n, zero_init=zero_init, require_even=require_even,
                        attention=dit.attention)
        missing, unexpected = model.load_state_dict(dit.state_dict(keep_vars=True), strict=False, assign=True)
        bad = [k for k in missing if not k.startswith("skip_fusions.")]
        if bad or unexpected:
            raise RuntimeError(f"dense model does not match the SUV variant: missing {bad[:5]}, "
                               f"unexpected {list(unexpected)[:5]}")
        for j in range(len(model.skip_fusions)):
            model.skip_fusions[j] = SkipFusion(dit.config.dim, zero_init=zero_init).to(dit.device)
        dense_buffers = dict(dit.named_buffers())   # non-persistent buffers are not in the state dict
        for name, buf in list(model.named_buffers()):
            if buf.is_meta:
                if name not in dense_buffers:
                    raise RuntimeError(f"buffer {name!r} has no counterpart in the dense model")
                _set_buffer(model, name, dense_buffers[name])
        left = [n for n, p in model.named_parameters() if p.is_meta]
        if left:
            raise RuntimeError(f"parameters not taken from the dense model: {left[:5]}")
        model.train(dit.training)
        return model


def _set_buffer(model: nn.Module, name: str, value: torch.Tensor) -> None:
    *path, leaf = name.split(".")
    mod = model
    for p in path:
        mod = getattr(mod, p)
    persistent = leaf not in mod._non_persistent_buffers_set
    mod.register_buffer(leaf, value, persistent=persistent)
