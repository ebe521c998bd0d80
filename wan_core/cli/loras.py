"""``--lora FILE[:STRENGTH]`` (on the DiT, on each expert of a Wan 2.2 A14B pair) and ``--lora-high/--lora-low``
(one expert each): parsing, the checks before loading, and applying them in order (docs/lora.md)."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..estimate import LORA_STRENGTH_LIMIT

if TYPE_CHECKING:
    from .request import GenerateRequest


def parse_lora(spec: str) -> tuple[str, float]:
    """``FILE[:STRENGTH]`` -> (file, strength); a tail after the last ':' that is not a number belongs to the
    file name (e.g. a Windows drive letter)."""
    path, sep, tail = spec.rpartition(":")
    if sep and path:
        try:
            return path, float(tail)
        except ValueError:
            pass
    return spec, 1.0


def lora_problem(spec: str) -> str | None:
    path, strength = parse_lora(spec)
    if not math.isfinite(strength) or abs(strength) > LORA_STRENGTH_LIMIT:
        return (f"--lora {spec}: the strength must be a finite number from -{LORA_STRENGTH_LIMIT:g} to "
                f"{LORA_STRENGTH_LIMIT:g}")
    if not Path(path).expanduser().is_file():
        return f"--lora {spec}: no such file {path!r}"
    return None


def expert_loras(request: "GenerateRequest") -> list[tuple[str, str]]:
    """``(flag, spec)`` of --lora-high / --lora-low, in that order."""
    return ([("--lora-high", spec) for spec in request.lora_high]
            + [("--lora-low", spec) for spec in request.lora_low])


def problems(request: "GenerateRequest") -> list[str]:
    """Each --lora, --lora-high and --lora-low that names no file or has a strength that is not a number."""
    out = []
    for flag, spec in [("--lora", spec) for spec in request.lora] + expert_loras(request):
        problem = lora_problem(spec)
        if problem:
            out.append(problem.replace("--lora", flag, 1))
    return out


def lora_targets(request: "GenerateRequest", dit) -> list[tuple[str, str, Any]]:
    """``(spec, label, model)`` in the order they are applied: every --lora on the DiT (on each expert of a
    ``WanMoE``), then each --lora-high on the high-noise expert and each --lora-low on the low-noise one."""
    from ..dit.moe import experts

    out = [(spec, _label(name), model) for spec in request.lora for name, model in experts(dit)]
    for flag, spec in expert_loras(request):
        name = flag.rsplit("-", 1)[1]
        out.append((spec, _label(name), dit.expert(name)))
    return out


def _label(expert: str) -> str:
    return f"{expert}-noise expert: " if expert else ""


def apply_loras(request: "GenerateRequest", dit) -> None:
    """The --lora files on the DiT (on each expert of --dit-high/--dit-low), in order, each with its strength; one
    line each on stderr (with unused keys)."""
    import warnings

    from ..lora import LoraWarning, apply_lora

    for spec, label, model in lora_targets(request, dit):
        path, strength = parse_lora(spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LoraWarning)  # the summary line below names the unused keys
            applied = apply_lora(model, Path(path).expanduser(), strength=strength,
                                 merge=request.lora_mode == "merged")
        print(f"wan_core: {label}{applied.summary()}", file=sys.stderr)


def names(specs) -> list[str]:
    """``name:strength`` of each ``FILE[:STRENGTH]`` (what the output's metadata stores)."""
    return [f"{Path(path).name}:{strength:g}" for path, strength in map(parse_lora, specs)]
