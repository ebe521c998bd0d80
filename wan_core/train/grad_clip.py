"""Adaptive gradient clipping (Open-Sora Plan v1.5 rule) with a global gradient norm.

Implements docs/algorithms.md section 1.7 (v1.5): EMA of the grad norm and of its variance, clip at
mean + 3 std, spikes leave the statistics alone, extreme spikes / NaN stop training with a marker file.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Iterable, NoReturn, Optional, Union

import torch

__all__ = [
    "AdaptiveGradClipper",
    "ClipResult",
    "GradientSpikeError",
    "global_grad_norm",
    "read_spike_marker",
    "clear_spike_marker",
]

_SENTINEL = -1e6  # "no statistics yet", as the reference initialises the EMA of the norm


class GradientSpikeError(RuntimeError):
    """Training must stop: the global grad norm is NaN/Inf or above the extreme threshold.

    Attributes: ``step`` (the optimizer step whose batch caused it), ``grad_norm``, ``threshold`` (the
    extreme threshold max(mean + 5 std, floor)), ``marker_path`` (file written so a resumed run skips that
    step's data, or None). The gradients were *not* applied; resume from the last checkpoint:
    :func:`read_spike_marker` tells the data position to continue from.
    """

    def __init__(self, message: str, *, step: Optional[int], grad_norm: float, threshold: float,
                 marker_path: Optional[str]):
        super().__init__(message)
        self.step = step
        self.grad_norm = grad_norm
        self.threshold = threshold
        self.marker_path = marker_path


@dataclass
class ClipResult:
    """Outcome of one clipping call.

    ``grad_norm``: global L2 norm before clipping; ``threshold``: mean + 3 std used (NaN on the first
    step); ``status``: "init" (first step: statistics initialised, no clip), "normal" (no clip, statistics
    updated), "clipped" (grads scaled by ``scale``, statistics unchanged); ``mean``/``var``: statistics
    after the call.
    """

    grad_norm: float
    threshold: float
    status: str
    scale: float
    mean: float
    var: float

    @property
    def clipped(self) -> bool:
        return self.status == "clipped"


def _grads(parameters) -> list:
    if isinstance(parameters, torch.nn.Module):
        parameters = parameters.parameters()
    elif isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _is_dtensor(x) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except Exception:  # pragma: no cover - very old torch
        return False
    return isinstance(x, DTensor)


def _is_fsdp1(module) -> bool:
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except Exception:  # pragma: no cover
        return False
    return isinstance(module, FullyShardedDataParallel)


def global_grad_norm(
    parameters: Union[torch.nn.Module, Iterable[torch.Tensor], torch.Tensor],
    *,
    sharded: Optional[bool] = None,
    process_group=None,
) -> torch.Tensor:
    """Global L2 norm of all gradients, accumulated in float32, as a 0-d tensor on the gradients' device.

    * plain model, or DDP (gradients already averaged and identical on all ranks): the local norm;
    * FSDP2 / DTensor gradients: local shards' squared norms are summed over the mesh dimensions the
      gradient is sharded on (one ``all_reduce`` per group of gradients, replicated dimensions are not
      double counted);
    * sharded plain-tensor gradients (FSDP1 flat-parameter shards, or any manual sharding): pass
      ``sharded=True`` (automatic for an FSDP1 module) and the squared norms are summed with an
      ``all_reduce`` over ``process_group``: norm = sqrt(sum over ranks of local sums of squares).
    Every rank gets the same value, so every rank takes the same clipping decision. All ranks must call
    it with the same parameters in the same order (it runs collectives).
    """
    if sharded is None:
        sharded = isinstance(parameters, torch.nn.Module) and _is_fsdp1(parameters)
    grads = _grads(parameters)
    device = grads[0].device if grads else torch.device("cpu")
    local_sq = torch.zeros((), dtype=torch.float32, device=device)
    dt_groups: dict = {}
    for g in grads:
        if _is_dtensor(g):
            placements = g.placements
            if any(p.is_partial() for p in placements):
                raise ValueError("a gradient DTensor is still Partial (not reduced); call after the backward's "
                                 "reduce-scatter has finished")
            shard_dims = tuple(i for i, p in enumerate(placements) if p.is_shard())
            key = (id(g.device_mesh), shard_dims)
            if key not in dt_groups:
                dt_groups[key] = [g.device_mesh, shard_dims, torch.zeros((), dtype=torch.float32, device=device)]
            local = g.to_local().detach()
            dt_groups[key][2] += torch.linalg.vector_norm(local, 2, dtype=torch.float32).to(device) ** 2
        else:
            local_sq = local_sq + torch.linalg.vector_norm(g.detach(), 2, dtype=torch.float32).to(device) ** 2
    dist = torch.distributed
    if sharded:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("global_grad_norm(sharded=True) needs an initialised torch.distributed group")
        dist.all_reduce(local_sq, op=dist.ReduceOp.SUM, group=process_group)
    for mesh, shard_dims, sq in dt_groups.values():
        for d in shard_dims:
            dist.all_reduce(sq, op=dist.ReduceOp.SUM, group=mesh.get_group(d))
        local_sq = local_sq + sq
    return torch.sqrt(local_sq)


def _scale_grads_(parameters, scale: float) -> None:
    for g in _grads(parameters):
        g.detach().mul_(scale)


def read_spike_marker(path: Union[str, os.PathLike]) -> Optional[dict]:
    """The marker written by :class:`AdaptiveGradClipper` on an extreme spike, or None if absent.

    Keys: ``step`` (bad optimizer step), ``resume_data_step`` (= step + 1: continue the data from here),
    ``grad_norm``, ``threshold``.
    """
    if not os.path.exists(path):
        return None
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f)


def clear_spike_marker(path: Union[str, os.PathLike]) -> None:
    """Remove a spike marker (after a resumed run has passed the bad data)."""
    if os.path.exists(path):
        os.remove(path)


class AdaptiveGradClipper:
    """Open-Sora Plan v1.5 adaptive clipping on the global gradient norm g (docs/algorithms.md section 1.7).

    State: ``mean`` (EMA of g, starts at the sentinel -1e6) and ``var`` (EMA of its variance).

    * first call (mean < 0): mean <- min(3 g, first_cap), var <- 0, no clipping;
    * tau = mean + 3 sqrt(var); tau_x = max(mean + 5 sqrt(var), extreme_floor);
    * g <= tau: no clipping; mean <- d mean + (1-d) g; var <- d var + (1-d) (mean_new - g)^2 (the
      *updated* mean, as the reference);
    * tau < g <= tau_x: grads scaled by 1 / (g/tau + 1e-6) (norm ~ tau); statistics unchanged;
    * g > tau_x or g not finite: nothing changes, a marker is written (if ``marker_path``, by the main
      rank) and :class:`GradientSpikeError` is raised.

    d = ``decay`` (0.99). ``n_std_clip`` = 3, ``n_std_extreme`` = 5, ``extreme_floor`` = 5.0,
    ``first_cap`` = 1.0 are the reference's constants. Note the reference consequence: if norms stay above
    ``first_cap`` from the first step on, the threshold stays at ``first_cap`` (a fixed clip at 1.0) and a
    norm above ``extreme_floor`` stops training; raise ``extreme_floor`` for models whose norms are large.

    Use: ``loss.backward(); result = clipper.clip_(model, step=k); optimizer.step()``. ``step`` is the
    position of the batch in the data stream (in optimizer steps; equal to the optimizer step unless a
    resumed run skipped data): it goes into the error and the marker.
    Pass ``sharded=True`` / ``process_group`` for sharded gradients (see :func:`global_grad_norm`).
    """

    def __init__(
        self,
        *,
        decay: float = 0.99,
        n_std_clip: float = 3.0,
        n_std_extreme: float = 5.0,
        extreme_floor: float = 5.0,
        first_cap: float = 1.0,
        marker_path: Union[str, os.PathLike, None] = None,
        sharded: Optional[bool] = None,
        process_group=None,
    ):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = float(decay)
        self.n_std_clip = float(n_std_clip)
        self.n_std_extreme = float(n_std_extreme)
        self.extreme_floor = float(extreme_floor)
        self.first_cap = float(first_cap)
        self.marker_path = None if marker_path is None else os.fspath(marker_path)
        self.sharded = sharded
        self.process_group = process_group
        self.mean = _SENTINEL
        self.var = 0.0
        self.num_clipped = 0

    # ----------------------------------------------------------------------------------------------
    @property
    def initialised(self) -> bool:
        return self.mean >= 0

    def thresholds(self) -> tuple:
        """(clip threshold mean + 3 std, extreme threshold max(mean + 5 std, floor)); NaN before init."""
        if not self.initialised:
            return float("nan"), float("nan")
        sd = math.sqrt(self.var)
        return self.mean + self.n_std_clip * sd, max(self.mean + self.n_std_extreme * sd, self.extreme_floor)

    def update(self, grad_norm: float, step: Optional[int] = None) -> ClipResult:
        """Apply the rule to a norm value (no gradients touched); returns the decision.

        Raises :class:`GradientSpikeError` (after writing the marker) on NaN/Inf or an extreme spike.
        """
        g = float(grad_norm)
        if not math.isfinite(g):
            self._fail(step, g, self.thresholds()[1], "is not finite")
        if not self.initialised:
            self.mean = min(3.0 * g, self.first_cap)
            self.var = 0.0
            return ClipResult(g, float("nan"), "init", 1.0, self.mean, self.var)
        tau, tau_x = self.thresholds()
        if g <= tau:
            d = self.decay
            self.mean = d * self.mean + (1.0 - d) * g
            self.var = d * self.var + (1.0 - d) * (self.mean - g) ** 2
            return ClipResult(g, tau, "normal", 1.0, self.mean, self.var)
        if g <= tau_x:
            self.num_clipped += 1
            return ClipResult(g, tau, "clipped", 1.0 / (g / tau + 1e-6), self.mean, self.var)
        self._fail(step, g, tau_x, f"exceeds the extreme threshold {tau_x:.6g} = max(mean + "
                   f"{self.n_std_extreme:g} std, {self.extreme_floor:g})")

    def clip_(self, parameters, step: Optional[int] = None) -> ClipResult:
        """Compute the global grad norm of ``parameters`` (module or tensors), apply the rule in place."""
        norm = global_grad_norm(parameters, sharded=self.sharded, process_group=self.process_group)
        result = self.update(float(norm), step=step)
        if result.status == "clipped":
            _scale_grads_(parameters, result.scale)
        return result

    # ----------------------------------------------------------------------------------------------
    def _fail(self, step, g, tau_x, why) -> NoReturn:
        marker = None
        if self.marker_path is not None:
            marker = self.marker_path
            if _is_main_rank():
                write_spike_marker(marker, step=step, grad_norm=g, threshold=tau_x)
        where = f"at step {step}" if step is not None else ""
        hint = (f"; marker {marker!r} written: resume from the last checkpoint and the data continues at "
                f"step {None if step is None else step + 1}, skipping the bad batch" if marker else
                "; set marker_path to record the bad step for a resumed run")
        raise GradientSpikeError(
            f"gradient norm {g!r} {where} {why} (EMA mean {self.mean:.6g}, var {self.var:.6g}); "
            f"gradients were not applied{hint}",
            step=step, grad_norm=g, threshold=tau_x, marker_path=marker,
        )

    def state_dict(self) -> dict:
        return {"mean": self.mean, "var": self.var, "num_clipped": self.num_clipped, "decay": self.decay}

    def load_state_dict(self, state: dict) -> None:
        self.mean = float(state["mean"])
        self.var = float(state["var"])
        self.num_clipped = int(state.get("num_clipped", 0))


def _is_main_rank() -> bool:
    dist = torch.distributed
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def write_spike_marker(path, *, step: Optional[int], grad_norm: float, threshold: float) -> None:
    """Write the spike marker atomically (JSON; see :func:`read_spike_marker`)."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    payload = {
        "step": step,
        "resume_data_step": None if step is None else step + 1,
        "grad_norm": grad_norm if math.isfinite(grad_norm) else str(grad_norm),
        "threshold": threshold if math.isfinite(threshold) else str(threshold),
    }
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f)
    os.replace(tmp, path)
