"""The one module that touches ComfyUI (``comfy``, ``folder_paths``, the progress bar, interrupts).

Everything else in ``nodes/`` calls these functions; outside ComfyUI they fall back to plain behaviour:
model files from ``WANCORE_MODELS_DIR`` (or ``./models``) with ComfyUI's sub-folder names, tqdm progress,
and an interrupt flag that tests (or a CLI signal handler) can raise.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable

import torch

try:  # ComfyUI present
    import folder_paths as _folder_paths  # type: ignore[import-not-found]
    import comfy.model_management as _mm  # type: ignore[import-not-found]
    import comfy.utils as _comfy_utils  # type: ignore[import-not-found]
    IN_COMFYUI = True
except Exception:  # noqa: BLE001 - any import failure means "not inside ComfyUI"
    _folder_paths = _mm = _comfy_utils = None
    IN_COMFYUI = False

MODEL_EXTENSIONS = (".safetensors", ".sft", ".pth", ".pt", ".ckpt", ".bin")
# ComfyUI folder name -> sub-folders searched in the fallback models dir (ComfyUI's defaults)
_FALLBACK_FOLDERS = {
    "diffusion_models": ("diffusion_models", "unet"),
    "vae": ("vae",),
    "text_encoders": ("text_encoders", "clip"),
    "LLM": ("LLM", "llm"),
}


class Interrupted(Exception):
    """Raised by ``check_interrupt`` outside ComfyUI (inside it, ComfyUI's own exception is raised)."""


_interrupt = threading.Event()


def models_dir() -> Path:
    return Path(os.environ.get("WANCORE_MODELS_DIR", "models")).expanduser()


def list_models(folder: str) -> list[str]:
    """File names offered in a loader's combo box (relative to the folder, as ComfyUI lists them)."""
    if IN_COMFYUI:
        return list(_folder_paths.get_filename_list(folder))
    names: list[str] = []
    for sub in _FALLBACK_FOLDERS.get(folder, (folder,)):
        root = models_dir() / sub
        if root.is_dir():
            for p in sorted(root.rglob("*")):
                if p.is_file() and p.suffix.lower() in MODEL_EXTENSIONS:
                    names.append(p.relative_to(root).as_posix())
                elif p.is_dir() and (p / "config.json").exists():
                    names.append(p.relative_to(root).as_posix())
    return sorted(set(names))


def model_path(folder: str, name: str) -> Path:
    """Resolve a combo choice to a path, with an error that names the folder and what is there."""
    if IN_COMFYUI:
        full = _folder_paths.get_full_path(folder, name)
        if full is not None:
            return Path(full)
        where = ", ".join(_folder_paths.get_folder_paths(folder))
    else:
        for sub in _FALLBACK_FOLDERS.get(folder, (folder,)):
            p = models_dir() / sub / name
            if p.exists():
                return p
        where = ", ".join(str(models_dir() / s) for s in _FALLBACK_FOLDERS.get(folder, (folder,)))
    if os.path.isabs(name) and os.path.exists(name):
        return Path(name)
    available = list_models(folder)
    hint = f"available: {', '.join(available[:8])}" if available else "the folder is empty"
    raise FileNotFoundError(f"model file {name!r} not found in '{folder}' ({where}); {hint}")


def torch_device() -> torch.device:
    if IN_COMFYUI:
        return _mm.get_torch_device()
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def offload_device() -> torch.device:
    return _mm.unet_offload_device() if IN_COMFYUI else torch.device("cpu")


def intermediate_device() -> torch.device:
    return _mm.intermediate_device() if IN_COMFYUI else torch.device("cpu")


def free_memory_for(module: torch.nn.Module, device: torch.device) -> None:
    """Ask ComfyUI to unload its own models until ``module`` fits on ``device`` (no-op outside ComfyUI)."""
    if IN_COMFYUI and device.type != "cpu":
        need = sum(p.numel() * p.element_size() for p in module.parameters())
        _mm.free_memory(need * 1.2 + 512 * 1024**2, device)


def soft_empty_cache() -> None:
    if IN_COMFYUI:
        _mm.soft_empty_cache()
    elif torch.cuda.is_available():
        torch.cuda.empty_cache()


def request_interrupt() -> None:
    """Ask running work to stop at its next check (fallback mode; ComfyUI has its own button)."""
    if IN_COMFYUI:
        _mm.interrupt_current_processing(True)
    _interrupt.set()


def clear_interrupt() -> None:
    _interrupt.clear()


def check_interrupt() -> None:
    """Raise if the user asked to stop; called in every long loop (per step, per decode chunk)."""
    if IN_COMFYUI:
        _mm.throw_exception_if_processing_interrupted()
    if _interrupt.is_set():
        _interrupt.clear()
        raise Interrupted("interrupted by the user")


class Progress:
    """Progress reporting: ComfyUI's progress bar (with an optional preview image) or tqdm."""

    def __init__(self, total: int, desc: str = "", node_id: str | None = None):
        self.total = total
        if IN_COMFYUI:
            self._bar = _comfy_utils.ProgressBar(total, node_id=node_id)
            self._tqdm = None
        else:
            from tqdm.auto import tqdm

            self._bar = None
            self._tqdm = tqdm(total=total, desc=desc, leave=False, disable=os.environ.get("WANCORE_QUIET") == "1")

    def update(self, value: int, preview: Any | None = None, total: int | None = None) -> None:
        """Set absolute progress; ``preview``: a PIL image shown in ComfyUI (ignored by tqdm)."""
        if total is not None and total != self.total:
            self.total = total
            if self._tqdm is not None:
                self._tqdm.total = total
        if self._bar is not None:
            self._bar.update_absolute(value, self.total, ("JPEG", preview, 512) if preview is not None else None)
        elif self._tqdm is not None:
            self._tqdm.update(value - self._tqdm.n)

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_callback(total: int, desc: str, preview: Callable[[torch.Tensor], Any] | None = None):
    """A ``(step, total, x, x0_hat)`` sampling callback driving a ``Progress``; returns (callback, progress)."""
    bar = Progress(total, desc)

    def callback(step: int, _total: int, _x: torch.Tensor, x0: torch.Tensor) -> None:
        bar.update(step, preview(x0) if (preview is not None and IN_COMFYUI) else None)

    return callback, bar


def _module_of(model) -> torch.nn.Module | None:
    if isinstance(model, torch.nn.Module):
        return model
    inner = getattr(model, "model", None)
    return inner if isinstance(inner, torch.nn.Module) else None


class on_device:
    """Context manager: run ``model`` on ``device`` (freeing ComfyUI memory first), offload it afterwards.

    Works for ``torch.nn.Module`` and the wan_core wrappers that have ``.to(device)``.
    """

    def __init__(self, model, device: torch.device | None = None):
        self.model = model
        self.device = torch.device(device or getattr(model, "wancore_device", None) or torch_device())

    def __enter__(self):
        module = _module_of(self.model)
        self.moved = module is not None and next(module.parameters()).device != self.device
        if self.moved:
            free_memory_for(module, self.device)
            self.model.to(self.device)
        return self.model

    def __exit__(self, *exc) -> None:
        if self.moved:
            self.model.to(offload_device())
            soft_empty_cache()
