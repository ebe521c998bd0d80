"""LoRA node: WANCORE_MODEL -> WANCORE_MODEL with one more LoRA from ComfyUI's ``loras`` folder (docs/lora.md
section 4). Chainable; the loaded DiT is shared, each output carries its own LoRA stack, which the sampler
puts on the weights before it runs (``wan_core.lora.activate_loras``), so changing a strength or a LoRA
never reloads the model."""
from __future__ import annotations

from wan_core.checkpoint import SAFETENSORS_EXTS, open_checkpoint
from wan_core.lora import foreign_lora, prepare_lora, with_lora

from . import host
from .declare import Input, NodeSpec, Output

MODES = ("merged", "unmerged")


def validate_lora(lora_name: str) -> bool | str:
    """Pre-queue check: one of the ``loras`` folder's choices (never a path a client made up) whose key names
    (read from the safetensors header, no tensor data) include a Wan DiT layer."""
    try:
        path = host.model_path("loras", lora_name)
        if path.suffix.lower() in SAFETENSORS_EXTS and path.is_file():
            foreign = foreign_lora(open_checkpoint(path).keys())
            if foreign:
                return host.client_message(f"lora_name: {lora_name}: a LoRA for {foreign}, not for the Wan DiT")
    except ValueError as e:  # NotInList, CheckpointError (unreadable header)
        return host.client_message(f"lora_name: {e}")
    return True


def apply(model, lora_name: str, strength: float = 1.0, mode: str = "merged"):
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    path = host.model_path("loras", lora_name)  # only a listed name, even if validation was skipped
    applied = prepare_lora(model, path, strength, merge=mode == "merged")
    host.show_text(applied.summary())
    return (with_lora(model, applied),)


LORA = NodeSpec(
    node_id="WanCoreLoRA", display_name="WanCore LoRA", category="WanCore/loaders",
    description="Adds a LoRA from models/loras to a WanCore model (official/ComfyUI, kohya/musubi or diffusers "
                "layout; distilled LoRAs' full deltas too). Chain several, each with its own strength. The "
                "model is not reloaded when a LoRA or strength changes: original weights are restored from a "
                "CPU copy.",
    inputs=(
        Input("model", "WANCORE_MODEL"),
        Input("lora_name", "COMBO", options=lambda: host.list_models("loras"),
              tooltip="e.g. Wan21_T2V_14B_lightx2v_cfg_step_distill_lora_rank32.safetensors"),
        Input("strength", "FLOAT", default=1.0, min=-10.0, max=10.0, step=0.01,
              tooltip="multiplies the LoRA's change; 0 = the model without it, exactly"),
        Input("mode", "COMBO", default="merged", options=MODES,
              tooltip="merged: added into the weights (fp8 weights requantised), no cost per step; unmerged: "
                      "a low-rank branch at run time, weights untouched (fp8 bits kept), a little slower"),
    ),
    outputs=(Output("WANCORE_MODEL", "model"),),
    fn=apply,
    validate=validate_lora,
    search_aliases=("lora", "lightx2v", "distill lora"),
)

NODES = (LORA,)
