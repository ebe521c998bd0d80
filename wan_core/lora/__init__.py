"""LoRA for the Wan DiT: every layout in circulation, merged / unmerged, fp8-aware, stackable, restorable
without rereading the checkpoint (docs/lora.md)."""
from .formats import LAYOUTS, LoraFile, read_lora
from .match import LoraError, Patch, foreign_lora, lora_family, match_lora
from .stack import (AppliedLora, LoraWarning, activate_loras, apply_lora, prepare_lora, remove_loras,
                    wanted_loras, with_lora)

__all__ = ["LAYOUTS", "AppliedLora", "LoraError", "LoraFile", "LoraWarning", "Patch", "activate_loras",
           "apply_lora", "foreign_lora", "lora_family", "match_lora", "prepare_lora", "read_lora", "remove_loras",
           "wanted_loras", "with_lora"]
