"""LoRAs on a DiT: ``apply_lora`` / ``remove_loras`` and the stack behind them (docs/lora.md section 2).

Like ComfyUI's ModelPatcher, the patches are kept beside the model, in its ``ModelRuntime``
(``wan_core.dit.runtime``): ``wanted_loras`` is the LoRAs a model (or a view of it) should carry, in order,
each with its strength and mode; ``lora`` (a ``LoraState``, shared by the views of one DiT) is what its weights
carry now, the CPU backups of the merged parameters and
the run-time branches. ``activate_loras`` brings the weights from the second to the first: it restores the
original bits from the backups and applies the wanted LoRAs again, so a strength change never rereads the
checkpoint. ``with_lora`` makes such a view (a shallow copy sharing every weight) for graph nodes.
"""
from __future__ import annotations

import copy
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch.nn as nn

from ..checkpoint import Source
from ..dit.runtime import runtime_of, update_runtime
from ..estimate import LORA_STRENGTH_LIMIT
from .branch import LoraBranch, can_branch
from .formats import LoraFile, read_lora
from .match import Patch, match_lora
from .merge import Backup, backup, merge, owner, restore

class LoraWarning(UserWarning):
    """Keys of a LoRA that patch nothing in the model (count and examples in the message)."""


@dataclass(eq=False)
class AppliedLora:
    """One LoRA on a model: the file read, its strength and mode, and what it patches.

    ``patches``: the parameter changes (``Patch``); ``unused``: ``[(key, why)]`` for keys patching nothing;
    ``merge``: True = merged into the weights, False = run-time branch on linear layers (other parameters,
    e.g. norms or the patch embedding, are merged even then)."""

    lora: LoraFile
    strength: float
    merge: bool
    patches: list[Patch]
    unused: list[tuple[str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.lora.name

    @property
    def parameters(self) -> int:
        return len({p.param for p in self.patches})

    def summary(self) -> str:
        mode = "merged" if self.merge else "unmerged"
        text = (f"LoRA {self.name} ({self.lora.layout} layout) at strength {self.strength:g}, {mode}: "
                f"{self.parameters} parameters patched")
        if self.unused:
            examples = ", ".join(f"{k} ({why})" for k, why in self.unused[:3])
            text += f"; {len(self.unused)} keys not used, e.g. {examples}"
        return text


@dataclass
class LoraState:
    """What the weights of one DiT carry now (shared by its views)."""

    applied: list[AppliedLora] = field(default_factory=list)
    backups: dict[str, Backup] = field(default_factory=dict)
    hooks: list = field(default_factory=list)


def lora_state(model: nn.Module) -> LoraState:
    state = runtime_of(model).lora
    if state is None:
        state = LoraState()
        update_runtime(model, lora=state)
    return state


def wanted_loras(model: nn.Module) -> tuple[AppliedLora, ...]:
    return runtime_of(model).wanted_loras


def prepare_lora(model: nn.Module, src: Source | LoraFile, strength: float = 1.0, merge: bool = True,
                 warn: bool = True) -> AppliedLora:
    """Read and match a LoRA against ``model`` without touching the weights (errors raised here). Unused keys
    are reported with a :class:`LoraWarning` unless ``warn=False``."""
    if (isinstance(strength, bool) or not isinstance(strength, (int, float)) or strength != strength
            or abs(strength) > LORA_STRENGTH_LIMIT):
        name = src.name if isinstance(src, LoraFile) else (
            Path(src).name if isinstance(src, (str, os.PathLike)) else "<state dict>")
        raise ValueError(f"LoRA {name}: strength must be a finite number from -{LORA_STRENGTH_LIMIT:g} to "
                         f"{LORA_STRENGTH_LIMIT:g}, got {strength!r}")
    lora = src if isinstance(src, LoraFile) else read_lora(src)
    patches, unused = match_lora(lora, model)
    applied = AppliedLora(lora, float(strength), bool(merge), patches, unused)
    if warn and unused:
        warnings.warn(applied.summary(), LoraWarning, stacklevel=3)
    return applied


def _restore_all(model: nn.Module, state: LoraState) -> None:
    for handle in state.hooks:
        handle.remove()
    for param, saved in state.backups.items():
        restore(model, param, saved)
    state.hooks.clear()
    state.backups.clear()
    state.applied.clear()


def _apply_one(model: nn.Module, state: LoraState, applied: AppliedLora) -> None:
    if applied.strength == 0:  # exactly the model without it
        state.applied.append(applied)
        return
    merged: dict[str, list[tuple[Patch, float]]] = {}
    branches: dict[str, tuple[list[tuple[Patch, float]], list[tuple[Patch, float]]]] = {}
    for patch in applied.patches:
        module_name, _, leaf = patch.param.rpartition(".")
        module, _ = owner(model, patch.param)
        if not applied.merge and can_branch(module, leaf):
            weight, bias = branches.setdefault(module_name, ([], []))
            (weight if leaf == "weight" else bias).append((patch, applied.strength))
        else:
            merged.setdefault(patch.param, []).append((patch, applied.strength))
    for param, changes in merged.items():
        if param not in state.backups:
            state.backups[param] = backup(model, param)
        merge(model, param, changes)
    for module_name, (weight, bias) in branches.items():
        state.hooks.append(model.get_submodule(module_name).register_forward_hook(LoraBranch(weight, bias)))
    state.applied.append(applied)


def activate_loras(model: nn.Module) -> None:
    """Make the weights carry exactly ``model``'s wanted LoRAs (a no-op when they already do).

    LoRAs added at the end of the stack are applied on top; any other change restores the original weights
    from the backups and applies the whole stack again. Swapped blocks left resident by a run that stopped
    inside one are settled first, so the change lands on the copies every later run reads."""
    state = lora_state(model)
    want = wanted_loras(model)
    done = state.applied
    if len(done) == len(want) and all(a is b for a, b in zip(done, want)):
        return
    swap = runtime_of(model).block_swap
    if swap is not None:
        swap.settle()
    if len(done) <= len(want) and all(a is b for a, b in zip(done, want)):
        for applied in want[len(done):]:
            _apply_one(model, state, applied)
        return
    _restore_all(model, state)
    for applied in want:
        _apply_one(model, state, applied)


def apply_lora(dit: nn.Module, path: Source, strength: float = 1.0, merge: bool = True) -> AppliedLora:
    """Apply a LoRA to ``dit`` **in place** (the weights of this model object change) and return what it did.

    ``path``: a LoRA file (any layout of docs/lora.md) or a ``{key: tensor}`` dict. ``strength``: multiplies
    the change (0 = no change at all). ``merge``: True = ``W += strength * alpha/rank * up @ down`` in float32,
    cast back (fp8 weights requantised); False = a run-time low-rank branch on the linear layers. Calls
    stack: each LoRA keeps its own strength. The original weights are kept on the CPU for
    :func:`remove_loras`. Raises ``LoraError`` (a ``CheckpointError``) naming the file, what it is for and
    the first key that does not fit; unused keys are reported with a ``LoraWarning``."""
    applied = prepare_lora(dit, path, strength, merge)
    update_runtime(dit, wanted_loras=(*wanted_loras(dit), applied))
    activate_loras(dit)
    return applied


def remove_loras(dit: nn.Module) -> None:
    """Remove every LoRA from ``dit`` **in place**: the original weights come back bit for bit from the CPU
    backups (the checkpoint is not read again) and the run-time branches are detached."""
    update_runtime(dit, wanted_loras=())
    activate_loras(dit)


def with_lora(dit: nn.Module, applied: AppliedLora) -> nn.Module:
    """A view of ``dit`` (a shallow copy sharing every weight) that wants ``dit``'s LoRAs plus ``applied``.

    The weights are not changed here: call :func:`activate_loras` on the view before running it (the
    sampler node does), so two views of one loaded DiT can carry different LoRAs in one graph."""
    lora_state(dit)  # created on the original first, so every view shares it
    view = copy.copy(dit)
    update_runtime(view, wanted_loras=(*wanted_loras(dit), applied))
    return view
