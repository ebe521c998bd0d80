"""The one module that touches ComfyUI (``comfy``, ``folder_paths``, the progress bar, interrupts).

Everything else in ``nodes/`` calls these functions; outside ComfyUI they fall back to plain behaviour:
model files from ``WANCORE_MODELS_DIR`` (or ``./models``) with ComfyUI's sub-folder names, tqdm progress,
and an interrupt flag that tests (or a CLI signal handler) can raise.
"""
from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any, Callable

import torch

from wan_core import progress as _progress
from wan_core.memory.swap import block_swap_of

try:  # ComfyUI present
    import folder_paths as _folder_paths
    import comfy.model_management as _mm
    import comfy.utils as _comfy_utils
    IN_COMFYUI = True
except Exception:  # noqa: BLE001 - any import failure means "not inside ComfyUI"
    _folder_paths = _mm = _comfy_utils = None
    IN_COMFYUI = False

MODEL_EXTENSIONS = (".safetensors", ".sft", ".pth", ".pt", ".ckpt", ".bin")
# ComfyUI's lists leave .gguf out; GGUF DiTs (docs/gguf.md) are listed from the same folders' directories
# (diffusion_models covers models/diffusion_models and models/unet, where ComfyUI-GGUF users keep them)
GGUF_FOLDERS = ("diffusion_models",)
# ComfyUI folder name -> sub-folders searched in the fallback models dir (ComfyUI's defaults)
_FALLBACK_FOLDERS = {
    "diffusion_models": ("diffusion_models", "unet"),
    "vae": ("vae",),
    "text_encoders": ("text_encoders", "clip"),
    "LLM": ("LLM", "llm"),
}


# Raised by ``check_interrupt`` outside ComfyUI (inside it, ComfyUI's own exception is raised): the core's one
# interrupt exception, so the CLI, the pipeline and the nodes catch the same thing.
Interrupted = _progress.Interrupted


_interrupt = threading.Event()


def models_dir() -> Path:
    return Path(os.environ.get("WANCORE_MODELS_DIR", "models")).expanduser()


# ---------------------------------------------------------------- model names: the folder lists are the authority
#
# Server clients are not trusted: a loader opens a file only by a name that the folder's list offers (what the
# combo box shows) or a built-in entry the pack registered. Any other value (an absolute path, ``../``, a
# name that is not there) gets the same answer whether or not such a path exists, so a client can neither
# load arbitrary files nor probe the server's disk.

_BUILTINS: dict[str, dict[str, Path]] = {}  # folder -> display name -> path, listed first


class NotInList(ValueError):
    """A model name that is not one of the choices of its folder (ComfyUI's ``value_not_in_list``)."""


def register_builtin(folder: str, name: str, path: str | os.PathLike) -> None:
    """Offer ``path`` under ``name`` in the lists of ``folder`` (first), e.g. a demo model shipped with the
    pack: ``register_builtin("diffusion_models", "wancore-demo (built-in)", Path(...))``."""
    _BUILTINS.setdefault(folder, {})[name] = Path(path)


def unregister_builtin(folder: str, name: str) -> None:
    _BUILTINS.get(folder, {}).pop(name, None)


def _builtin_names(folder: str, dirs_only: bool = False) -> list[str]:
    return [n for n, p in _BUILTINS.get(folder, {}).items() if not dirs_only or p.is_dir()]


def _first_builtins(builtins: list[str], found) -> list[str]:
    return builtins + [n for n in sorted(set(found)) if n not in builtins]


def list_models(folder: str) -> list[str]:
    """File names offered in a loader's combo box (relative to the folder, as ComfyUI lists them), after the
    built-in entries; model folders (a ``config.json`` inside, e.g. diffusers layouts) are listed too."""
    if IN_COMFYUI:
        found = list(_folder_paths.get_filename_list(folder)) + list_model_folders(folder, builtins=False)
        return _first_builtins(_builtin_names(folder), found + _gguf_files(folder))
    names: list[str] = []
    for sub in _FALLBACK_FOLDERS.get(folder, (folder,)):
        root = models_dir() / sub
        if root.is_dir():
            for p in sorted(root.rglob("*")):
                if p.is_file() and p.suffix.lower() in MODEL_EXTENSIONS:
                    names.append(p.relative_to(root).as_posix())
                elif p.is_dir() and (p / "config.json").exists():
                    names.append(p.relative_to(root).as_posix())
    return _first_builtins(_builtin_names(folder), names + _gguf_files(folder))


def _gguf_files(folder: str) -> list[str]:
    """The ``.gguf`` files under the directories of ``folder`` (only for ``GGUF_FOLDERS``), root-relative."""
    if folder not in GGUF_FOLDERS:
        return []
    return [p.relative_to(root).as_posix() for root in model_folder_roots(folder) if root.is_dir()
            for p in sorted(root.rglob("*")) if p.is_file() and p.suffix.lower() == ".gguf"]


def _show(name: object) -> str:
    text = repr(name)
    return text if len(text) <= 120 else text[:117] + "..."


def not_in_list_message(folder: str, name: object, available: list[str], what: str = "files") -> str:
    """``'x' is not one of the available files in models/<folder>: a, b, c``: the same text whether or not
    a path ``x`` exists anywhere (the message depends only on the name and the list)."""
    if available:
        more = f" (and {len(available) - 10} more)" if len(available) > 10 else ""
        choices = ", ".join(available[:10]) + more
    else:
        choices = f"none yet (put the model {what} in ComfyUI's models/{folder})"
    return f"{_show(name)} is not one of the available {what} in models/{folder}: {choices}"


def model_path(folder: str, name: str) -> Path:
    """Resolve a combo choice (a name ``list_models(folder)`` offers) to its path; ``NotInList`` otherwise."""
    builtin = _BUILTINS.get(folder, {}).get(name) if isinstance(name, str) else None
    if builtin is not None:
        return builtin
    available = list_models(folder)
    if isinstance(name, str) and name in available:
        if IN_COMFYUI:
            full = _folder_paths.get_full_path(folder, name)
            if full is not None:
                return Path(full)
        for root in model_folder_roots(folder):
            p = root / name
            if p.exists():
                return p
    raise NotInList(not_in_list_message(folder, name, available))


def model_folder_roots(folder: str) -> list[Path]:
    """The directories of a ComfyUI model folder name; a name ComfyUI does not know (``LLM``) is registered
    as ``models/<name>`` first. Outside ComfyUI: ``WANCORE_MODELS_DIR/<name>`` (and its usual aliases)."""
    if IN_COMFYUI:
        if folder not in _folder_paths.folder_names_and_paths:
            _folder_paths.add_model_folder_path(folder, os.path.join(_folder_paths.models_dir, folder))
        return [Path(p) for p in _folder_paths.get_folder_paths(folder)]
    return [models_dir() / sub for sub in _FALLBACK_FOLDERS.get(folder, (folder,))]


def list_model_folders(folder: str, max_depth: int = 3, markers: tuple[str, ...] = ("config.json",),
                       builtins: bool = True) -> list[str]:
    """Model *folders* (directories holding one of ``markers``, e.g. a transformers LLM's ``config.json`` or a
    tokenizer's ``spiece.model``) under a ComfyUI folder name, relative to its root (``Qwen2.5-3B-Instruct``,
    ``Qwen/Qwen2.5-3B-Instruct``), after the built-in folders; not searched below a model."""
    names: set[str] = set()
    for root in model_folder_roots(folder):
        if not root.is_dir():
            continue
        for here, dirs, files in os.walk(root, followlinks=True):
            rel = Path(here).relative_to(root)
            if rel.parts and any(m in files for m in markers):
                names.add(rel.as_posix())
                dirs[:] = []
            elif len(rel.parts) >= max_depth:
                dirs[:] = []
            else:
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return _first_builtins(_builtin_names(folder, dirs_only=True) if builtins else [], names)


def model_folder_path(folder: str, name: str, markers: tuple[str, ...] = ("config.json",),
                      what: str = "model folders") -> Path:
    """Resolve a model-folder choice (a name ``list_model_folders(folder, markers=markers)`` offers) to its
    directory; ``NotInList`` (naming the folder and the choices) for anything else."""
    builtin = _BUILTINS.get(folder, {}).get(name) if isinstance(name, str) else None
    if builtin is not None and builtin.is_dir():
        return builtin
    available = list_model_folders(folder, markers=markers)
    if isinstance(name, str) and name in available:
        for root in model_folder_roots(folder):
            p = root / name
            if p.is_dir():
                return p
    raise NotInList(not_in_list_message(folder, name, available, what))


# ---------------------------------------------------------------- messages for clients: no server paths

_CLIENT_FOLDERS = ("diffusion_models", "vae", "text_encoders", "LLM")


def _path_labels() -> list[tuple[str, str]]:
    """(absolute prefix, label) pairs, longest prefix first: each model folder root (as configured and with
    links resolved) -> its folder name, each built-in model's path -> its name."""
    pairs: dict[str, str] = {}
    for folder in dict.fromkeys((*_CLIENT_FOLDERS, *_BUILTINS)):
        try:
            roots = model_folder_roots(folder)
        except Exception:  # noqa: BLE001 - a message rewrite must never fail itself
            roots = []
        for root in roots:
            for form in {str(root), str(root.absolute()), os.path.realpath(root)}:
                if os.path.isabs(form):
                    pairs.setdefault(form.rstrip("/\\"), folder)
        for name, path in _BUILTINS.get(folder, {}).items():
            for form in {str(path), str(path.absolute()), os.path.realpath(path)}:
                pairs[form.rstrip("/\\")] = name
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


def client_message(text: str) -> str:
    """``text`` with the server's model folder paths replaced by ``<folder>/<name>``, for messages that reach
    API clients (validation results, node errors). The core keeps full paths for command-line users."""
    for prefix, label in _path_labels():
        if prefix and prefix in text:  # the whole path component only: /m/vae, not /m/vae2
            # backslashes doubled: the label is literal text (a Windows path), not a replacement template
            text = re.sub(re.escape(prefix) + r"(?![\w.-])", label.replace("\\", "\\\\"), text)
    return text


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
        raise Interrupted("work (the user asked to stop)")


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


def loading_progress(desc: str) -> tuple[Callable[[int, int], None], "Progress"]:
    """A ``(done, total)`` callback for model loading: progress bar plus the interrupt check."""
    bar = Progress(1, desc)

    def callback(done: int, total: int) -> None:
        check_interrupt()
        bar.update(done, total=total)

    return callback, bar


def progress_callback(total: int, desc: str, preview: Callable[[torch.Tensor], Any] | None = None):
    """A ``(step, total, x, x0_hat)`` sampling callback driving a ``Progress``; returns (callback, progress)."""
    bar = Progress(total, desc)

    def callback(step: int, _total: int, _x: torch.Tensor, x0: torch.Tensor) -> None:
        bar.update(step, preview(x0) if (preview is not None and IN_COMFYUI) else None)

    return callback, bar


def show_text(text: str) -> None:
    """Show ``text`` under the running node (ComfyUI's progress text, newer ComfyUI) and log it (console)."""
    import logging

    logging.getLogger("wancore").info(text)
    if not IN_COMFYUI:
        return
    try:
        from comfy_execution.utils import get_executing_context
        from server import PromptServer

        ctx = get_executing_context()
        if ctx is not None and getattr(PromptServer, "instance", None) is not None:
            PromptServer.instance.send_progress_text(text, ctx.node_id)
    except Exception as e:  # noqa: BLE001 - a ComfyUI without progress text: the log line is all there is
        logging.getLogger("wancore").debug("no progress text: %s", e)


def _module_of(model) -> torch.nn.Module | None:
    if isinstance(model, torch.nn.Module):
        return model
    inner = getattr(model, "model", None)
    return inner if isinstance(inner, torch.nn.Module) else None


class _Managed(torch.nn.Module):
    """Holder handed to ComfyUI's ModelPatcher, which assigns ``.device`` on the module it manages (a
    read-only property on WanDiT and transformers models), so the real module sits one level down.
    A block-swapped DiT (docs/memory.md section 3) is handed over as its resident parts only: ComfyUI loads
    and evicts those, the swapped blocks stay in pinned RAM and stream through the swap's own copies."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        from wan_core.memory.offload import resident_parts

        parts = resident_parts(module)  # a WanMoE of swapped experts: each expert's resident parts
        self.inner: torch.nn.Module = module if parts == [module] else torch.nn.ModuleList(parts)
        self.device = next(module.parameters()).device


def _swap_headroom(model) -> int:
    """Device bytes a block-swapped DiT needs beyond its resident weights: prefetch + 1 blocks in flight."""
    module = _module_of(model)
    parts = [module, *module.children()] if module is not None else []  # a WanMoE: one expert runs at a time
    swaps = [s for s in (block_swap_of(m) for m in parts) if s is not None]
    return max(((s.prefetch + 1) * s.stats.block_bytes for s in swaps), default=0)


class on_device:
    """Context manager: make ``model`` ready on its device for the duration of a node's work.

    Inside ComfyUI the module is handed to ComfyUI's model management (a ``ModelPatcher``): it is loaded on
    the GPU, stays there between runs, and is moved to the offload device when ComfyUI needs the memory for
    other models. Outside ComfyUI it is moved to ``device`` and back to the offload device afterwards.
    Works for ``torch.nn.Module`` and the wan_core wrappers (``WanVAE``, ``TextEncoder``) with ``.to()``.
    """

    def __init__(self, model, device: torch.device | None = None):
        self.model = model
        self.device = torch.device(device or getattr(model, "wancore_device", None) or torch_device())
        self.moved = False

    def _patcher(self, module: torch.nn.Module):
        patcher = getattr(self.model, "wancore_patcher", None)
        if patcher is None or patcher.load_device != self.device:
            import comfy.model_patcher

            patcher = comfy.model_patcher.ModelPatcher(_Managed(module), load_device=self.device,
                                                       offload_device=offload_device())
            self.model.wancore_patcher = patcher
        return patcher

    def __enter__(self):
        module = _module_of(self.model)
        if module is None:
            return self.model
        from wan_core.memory.offload import move, resident_parts

        if IN_COMFYUI:
            _mm.load_models_gpu([self._patcher(module)], force_full_load=True,
                                memory_required=_swap_headroom(self.model))  # room for the swapped blocks too
            return self.model
        probe = resident_parts(module)[0]
        self.moved = next(probe.parameters()).device != self.device
        if self.moved:
            move(self.model, self.device)  # a swapped DiT: its resident parts only
        return self.model

    def __exit__(self, *exc) -> None:
        if self.moved:
            from wan_core.memory.offload import move

            move(self.model, offload_device())
            soft_empty_cache()


# ---------------------------------------------------------------- ComfyUI's native MODEL (ModelPatcher) patches
#
# docs/native_patches.md. ``nodes/native/`` holds the patches as plain Python and puts them on a clone of the
# ModelPatcher (its ``model_options`` copied by ``clone()``), never on the input MODEL; these are the ComfyUI
# facts it needs.

NATIVE_WAN_MODULE = "comfy.ldm.wan"


def native_wan_model(model, what: str) -> Any:
    """The native Wan diffusion model (``comfy.ldm.wan...WanModel``) inside a MODEL; a one-line ValueError
    naming the model's class for anything else."""
    inner = getattr(getattr(model, "model", None), "diffusion_model", None)
    if inner is None:
        raise ValueError(f"{what}: expects a MODEL from ComfyUI's model loaders (a ModelPatcher), got "
                         f"{type(model).__name__}")
    cls = type(inner)
    if not cls.__module__.startswith(NATIVE_WAN_MODULE) or not hasattr(inner, "blocks"):
        raise ValueError(f"{what}: works on native Wan 2.1/2.2 models only; this MODEL is "
                         f"{cls.__module__}.{cls.__name__}")
    return inner


def transformer_options(patched) -> dict:
    """The ``transformer_options`` of a ModelPatcher clone's ``model_options`` (created when missing)."""
    return patched.model_options.setdefault("transformer_options", {})


def wrappers_mp(name: str) -> str:
    """``comfy.patcher_extension.WrappersMP.<name>`` (its lowercase value when ComfyUI is not importable)."""
    try:
        from comfy.patcher_extension import WrappersMP
    except ImportError:
        return name.lower()
    return getattr(WrappersMP, name)


def model_options_clone() -> Callable[[dict], dict]:
    """ComfyUI's ``create_model_options_clone`` (a sampling run's own copy of the patched ``model_options``)."""
    from comfy.model_patcher import create_model_options_clone

    return create_model_options_clone


def chain_block_patches(patched, make: Callable[[int, Any], Callable], num_layers: int) -> None:
    """Put ``make(i, previous)`` on every block (``patches_replace["dit"][("double_block", i)]``), chained to a
    replace patch already there."""
    replace = transformer_options(patched).get("patches_replace", {}).get("dit", {})
    for i in range(num_layers):
        patched.set_model_patch_replace(make(i, replace.get(("double_block", i))), "dit", "double_block", i)


# ---------------------------------------------------------------- the canvas estimate's model size (web/wancore.js)

DIT_INFO_ROUTE = "/wancore/dit_info"


def dit_file_summary(name: object) -> dict | None:
    """What the canvas estimate needs of a diffusion model offered in ComfyUI's ``diffusion_models`` list: its
    size and stored dtype from the safetensors header (``wan_core.estimate.dit_summary``), or None for a file that
    is not a released Wan DiT size. Only names the list offers are opened (``NotInList`` otherwise): a client
    can never make this read a path of its choosing."""
    from wan_core.checkpoint.safetensors_file import read_header
    from wan_core.estimate import dit_summary

    path = model_path("diffusion_models", name)  # type: ignore[arg-type]
    if path.suffix.lower() not in (".safetensors", ".sft") or not path.is_file():
        return None
    header = read_header(path)
    return dit_summary({k: (e.dtype, e.shape) for k, e in header.tensors.items()})


async def _dit_info(request):
    from aiohttp import web

    name = request.rel_url.query.get("name", "")
    try:
        summary = dit_file_summary(name)
    except (ValueError, OSError):  # not listed, or not a readable safetensors file: the canvas falls back to the name
        summary = None
    return web.json_response({"name": name, "summary": summary})


def register_routes() -> bool:
    """Add ``DIT_INFO_ROUTE`` (GET ``?name=<file in diffusion_models>``) to ComfyUI's server; False outside
    ComfyUI or before its server exists (tests, the CLI)."""
    if not IN_COMFYUI:
        return False
    try:
        from server import PromptServer
    except Exception:  # noqa: BLE001 - no server module: nothing to register with
        return False
    instance = getattr(PromptServer, "instance", None)
    if instance is None:
        return False
    instance.routes.get(DIT_INFO_ROUTE)(_dit_info)
    return True


def native_weight_patches(patcher) -> tuple[Any, dict[str, tuple]]:
    """``(version, {name: patches})``: the ModelPatcher's patch-set id (``patches_uuid``, new whenever patches
    are added) and, per diffusion-model weight it patches (state-dict name), its patches as ComfyUI applies them
    (``(strength, patch, strength_model, offset, function)`` each: a LoRA's strength is in there)."""
    prefix = "diffusion_model."
    patches = {k[len(prefix):]: tuple(tuple(p) for p in v) for k, v in patcher.patches.items()
               if k.startswith(prefix) and v}
    return getattr(patcher, "patches_uuid", None), patches


def native_patched_weights(patcher, names: list[str]) -> dict[str, torch.Tensor]:
    """The diffusion model's weights ``names`` with the patcher's patches (LoRAs) applied: the live weights
    when ComfyUI has patched them in place for this patcher (a full load), else computed from the live
    (unpatched) ones with ComfyUI's own ``calculate_weight`` (a low-VRAM load patches on the fly)."""
    model = patcher.model
    state = model.diffusion_model.state_dict(keep_vars=True)
    current = getattr(model, "current_weight_patches_uuid", None)
    in_place = current is not None and current == getattr(patcher, "patches_uuid", None) and \
        not getattr(model, "model_lowvram", False)
    if current is not None and not in_place and not getattr(model, "model_lowvram", False):
        raise ValueError("WanCore Native Context Parallel: the model's weights carry another MODEL's patches "
                         "(sampling loads the model first)")
    out = {}
    for name in names:
        w = state[name].detach()
        full = f"diffusion_model.{name}"
        if not in_place and full in patcher.patches:
            import comfy.lora

            w = comfy.lora.calculate_weight(patcher.patches[full], w.to(torch.float32, copy=True), full).to(w.dtype)
        out[name] = w
    return out


def native_build_spec(model) -> dict:
    """What a worker needs to build the same ComfyUI Wan model (class, ``unet_config``, weight and compute
    dtypes); the weights come separately."""
    base = model.model
    dm = base.diffusion_model
    weight_dtype = next(dm.parameters()).dtype
    return {"class_name": type(dm).__name__, "unet_config": dict(base.model_config.unet_config),
            "dtype": weight_dtype, "manual_cast_dtype": getattr(base, "manual_cast_dtype", None)}
