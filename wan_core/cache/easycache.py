"""EasyCache (Zhou et al. 2025): reuse the whole model's "transformation" ``v - x`` while the predicted change
of the output stays small; no calibration, no model-specific table.

At each step the first branch evaluated (cond under CFG) decides for the step: with ``k`` = the last measured
ratio of output change to input change (both mean absolute, between computed steps), it accumulates
``E += k * mean|x_i - x_{i-1}| / mean|v_last|``; while ``E < threshold`` every branch of the step returns
``x_i + (v_last - x_last)`` of its own last computed step (patch embedding, blocks and head all skipped), else
the step computes and ``E`` resets. Steps outside ``[first, stop)`` always compute. The inputs are the sampler's
latents and velocities (replicated across ranks), so parallel ranks decide the same. Follows
H-EmbodVis/EasyCache@51278044023e EasyCache4Wan2.1/easycache_generate.py (``easycache_forward``).
"""
from __future__ import annotations

import torch

__all__ = ["EasyCache"]


class EasyCache:
    """Whole-model policy. Tensors: ``x`` latents ``[b, 16, F, H, W]``, ``out`` velocities of the same shape."""

    name = "easycache"

    def __init__(self, threshold: float, first: int, stop: int):
        self.threshold = threshold
        self.first, self.stop = first, stop
        self.accumulated = 0.0
        self.rate: float | None = None       # k: output change / input change between computed steps
        self.decider: str | None = None      # the branch whose change drives the decisions
        self._step: int | None = None
        self._compute = True
        self._input_prev: torch.Tensor | None = None     # decider's input at its previous evaluation
        self._input_computed: torch.Tensor | None = None  # ... at its last computed step
        self._output_computed: torch.Tensor | None = None
        self.diffs: dict[str, torch.Tensor] = {}         # branch -> v - x of its last computed step

    def skip(self, step: int, branch: str, x: torch.Tensor, branches: list[str]) -> bool:
        """Whether the evaluation of ``branches`` at ``step`` (``x`` = the decider's rows) is reused."""
        if self._step != step:
            self._step = step
            self._decide(step, branch, x)
        return not self._compute and all(b in self.diffs for b in branches)

    def _decide(self, step: int, branch: str, x: torch.Tensor) -> None:
        if self.decider is None:
            self.decider = branch
        xf = x.float()
        compute = True
        if not self.first <= step < self.stop:
            self.accumulated = 0.0
        elif self._input_prev is not None and self.rate is not None and self._output_computed is not None:
            change = (xf - self._input_prev).abs().mean() / self._output_computed.abs().mean()
            self.accumulated += self.rate * change.item()
            compute = not (self.threshold > 0 and self.accumulated < self.threshold)
            if compute:
                self.accumulated = 0.0
        self._input_prev = xf.clone()
        self._compute = compute

    def reuse(self, branch: str, x: torch.Tensor) -> torch.Tensor:
        return x.float() + self.diffs[branch]

    def computed(self, branch: str, x: torch.Tensor, out: torch.Tensor) -> None:
        xf, of = x.float(), out.float()
        if branch == self.decider:
            if self._output_computed is not None and self._input_computed is not None:
                in_change = (xf - self._input_computed).abs().mean().item()
                if in_change > 0:
                    self.rate = (of - self._output_computed).abs().mean().item() / in_change
            self._input_computed, self._output_computed = xf.clone(), of.clone()
        self.diffs[branch] = of - xf
