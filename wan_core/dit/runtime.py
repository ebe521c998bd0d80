"""What is attached to a DiT from outside at run time: its LoRA stack, its block swap and its RIFLEx, in one typed
object.

The LoRAs (``wan_core.lora.stack``) and the block swap (``wan_core.memory.swap``) patch a model without the
model knowing; they keep their state here instead of in loose attributes. The object is frozen and replaced on
every change, so a shallow copy of a model (a LoRA view, ``copy.copy``) shares it until one of the two changes
its own: a view's wanted LoRAs stay its own, while the ``LoraState`` inside (what the shared weights carry now)
is one object for the original and all its views.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch.nn as nn

if TYPE_CHECKING:
    from ..lora.stack import AppliedLora, LoraState
    from ..memory.swap import BlockSwap
    from .riflex import RIFLEx

_ATTRIBUTE = "wancore_runtime"


@dataclass(frozen=True)
class ModelRuntime:
    """``lora``: what the weights carry now (None until a LoRA is first involved); ``wanted_loras``: the LoRAs
    this model object should carry, in order; ``block_swap``: the attached swap, if any; ``riflex``: the temporal
    RoPE change of the run (``wan_core.dit.riflex``; None = the model's own RoPE)."""

    lora: LoraState | None = None
    wanted_loras: tuple[AppliedLora, ...] = ()
    block_swap: BlockSwap | None = None
    riflex: RIFLEx | None = None


_NONE = ModelRuntime()


def runtime_of(model: nn.Module) -> ModelRuntime:
    """The runtime state attached to ``model`` (an empty one when nothing is attached)."""
    runtime = vars(model).get(_ATTRIBUTE)
    return runtime if isinstance(runtime, ModelRuntime) else _NONE


def update_runtime(model: nn.Module, **changes) -> ModelRuntime:
    """Attach ``model``'s runtime state with ``changes`` (fields of :class:`ModelRuntime`) and return it."""
    runtime = replace(runtime_of(model), **changes)
    vars(model)[_ATTRIBUTE] = runtime  # in the instance dict: not a submodule, parameter or buffer
    return runtime
