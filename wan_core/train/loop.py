"""A small, real training loop for velocity models ``model(x, t, context) -> v`` (flow matching).

Uses the objective (loss.py, docs/algorithms.md section 7), the bucket sampler (docs/algorithms.md section 1.6) and
adaptive clipping (1.7) with AdamW, fp32 or bf16 autocast, gradient accumulation and safetensors checkpoints.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import uuid
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Union, cast

import torch
from torch.utils.data import DataLoader, Dataset

from .bucket_sampler import BucketSampler
from .grad_clip import AdaptiveGradClipper, clear_spike_marker, read_spike_marker
from .loss import flow_matching_loss

__all__ = ["TrainConfig", "TrainResult", "train", "collate_latents", "evaluation_loss", "learning_rate",
           "latest_checkpoint", "save_checkpoint", "load_checkpoint", "SPIKE_MARKER_NAME", "CHECKPOINT_MARKER",
           "CheckpointFolderError", "is_saved_checkpoint", "load_ema", "sdpa_kernels", "ATTENTION_KERNELS",
           "check_attention_kernel"]

ATTENTION_KERNELS = ("auto", "math")


def check_attention_kernel(kernel: str, name: str = "attention kernel") -> None:
    """Raise a ValueError naming ``name`` unless ``kernel`` is one of ``ATTENTION_KERNELS``."""
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f"{name} must be one of {ATTENTION_KERNELS}, got {kernel!r}")


def sdpa_kernels(kernel: str):
    """Context in which ``scaled_dot_product_attention`` runs ``kernel``: "auto" (torch's choice, the fused
    flash kernel on CPU) or "math" (matrix products and a softmax, differentiated by autograd).

    Fused kernels win on long sequences; on short ones (the demo DiT's 48-80 video tokens) the CPU flash
    kernel's backward costs more than the math form's (``bench/train_kernels.py``). The forward decides: the
    backward runs the kernel the forward recorded."""
    check_attention_kernel(kernel)
    if kernel == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)

SPIKE_MARKER_NAME = "spike_marker.json"
EMA_FILE = "ema.safetensors"
_CKPT_RE = re.compile(r"^step_(\d+)$")


@dataclass
class TrainConfig:
    """Training settings. Defaults follow the Wan report where it gives one (AdamW, weight decay 1e-3,
    lr 1e-4, logit-normal timesteps) and docs/algorithms.md section 1.7 for clipping.

    precision: "fp32" or "bf16" (autocast; parameters and optimizer state stay fp32).
    lr_schedule: "constant" or "cosine" (from lr down to lr * min_lr_ratio at max_steps), after a linear
    warmup of ``warmup_steps``; the rate is a pure function of the step, so resuming needs no state.
    checkpoint_every: save every N optimizer steps (0: only at the end / on interrupt); ``keep_last``
    checkpoints are kept (0: all). ema_decay: keep an exponential moving average of the parameters (0: off),
    updated after every optimizer step n with decay ``min(ema_decay, (1 + n) / (10 + n))`` so the random
    initial weights fade fast; saved in checkpoints and returned as ``TrainResult.ema``.
    attention_kernel: ``scaled_dot_product_attention``'s kernel in the forward (``sdpa_kernels``; "auto" or
    "math", faster for short sequences on CPU). fused_adamw: the default optimizer is AdamW's fused
    implementation (one kernel over all parameters; not bit-identical to the per-tensor loop it replaces).
    compile_blocks: regional ``torch.compile`` of the model's Wan DiT blocks (``wan_core.memory.compile_blocks``,
    forward and backward; equal to eager up to float rounding). Where compile cannot run, one warning and the
    blocks stay eager (``TrainResult.compiled`` says which); a compiler failure that first shows in the backward
    pass is raised, for the caller to continue eager from the last checkpoint.
    clip_*: :class:`AdaptiveGradClipper` settings (``adaptive_clip=False`` disables clipping). grad_accum:
    micro-batches per optimizer step (the loss is averaged over them).
    """

    max_steps: int
    batch_size: int = 1
    grad_accum: int = 1
    lr: float = 1e-4
    weight_decay: float = 1e-3
    betas: tuple = (0.9, 0.999)
    adam_eps: float = 1e-8
    warmup_steps: int = 0
    lr_schedule: str = "constant"
    min_lr_ratio: float = 0.1
    precision: str = "fp32"
    timestep_mean: float = 0.0
    timestep_std: float = 1.0
    timestep_shift: float = 1.0
    adaptive_clip: bool = True
    clip_decay: float = 0.99
    clip_extreme_floor: float = 5.0
    clip_first_cap: float = 1.0
    seed: int = 42
    same_shape_across_ranks: bool = False
    checkpoint_dir: Optional[str] = None
    checkpoint_every: int = 0
    keep_last: int = 2
    num_workers: int = 0
    progress: bool = True
    ema_decay: float = 0.0
    attention_kernel: str = "auto"
    fused_adamw: bool = False
    compile_blocks: bool = False

    def __post_init__(self):
        check_attention_kernel(self.attention_kernel, "attention_kernel")
        if self.lr_schedule not in ("constant", "cosine"):
            raise ValueError(f"lr_schedule must be 'constant' or 'cosine', got {self.lr_schedule!r}")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be 'fp32' or 'bf16', got {self.precision!r}")
        if self.max_steps < 0 or self.batch_size < 1 or self.grad_accum < 1:
            raise ValueError("max_steps >= 0, batch_size >= 1 and grad_accum >= 1 are required")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1) (0: no average), got {self.ema_decay}")


@dataclass
class TrainResult:
    """``step``: optimizer steps done in total; ``data_step``: position in the data stream (optimizer-step
    units; larger than ``step`` after a spike skip); per-step lists for the steps run in this call;
    ``interrupted``: stopped by the interrupt callable; ``checkpoint``: last directory written; ``ema``:
    the parameters' moving average (``{name: fp32 tensor}``, parameters only) when ``ema_decay > 0``;
    ``compiled``: the DiT blocks ran compiled (``TrainConfig.compile_blocks`` and compile available)."""

    step: int
    data_step: int
    losses: List[float] = field(default_factory=list)
    grad_norms: List[float] = field(default_factory=list)
    clip_status: List[str] = field(default_factory=list)
    interrupted: bool = False
    checkpoint: Optional[str] = None
    ema: Optional[dict] = None
    compiled: bool = False


# ------------------------------------------------------------------------------------------------------
def collate_latents(items: Sequence):
    """Collate dataset items ``(latent [C,F,H,W], context)`` or ``{"latent":..., "context":..., "weight":...}``.

    Returns (latents [B,C,F,H,W], context) with context [B,L,D] if all share a shape, else a list of
    [L_i, D] tensors (the DiT accepts both), or None; when the items carry a ``weight`` (a per-element loss
    weight broadcastable to the latent, e.g. [1, F, H, W]), (latents, context, weights [B, ...]).
    """
    lat, ctx, wts = [], [], []
    for it in items:
        if isinstance(it, dict):
            lat.append(it["latent"])
            ctx.append(it.get("context"))
            wts.append(it.get("weight"))
        elif isinstance(it, (tuple, list)):
            lat.append(it[0])
            ctx.append(it[1] if len(it) > 1 else None)
            wts.append(None)
        else:
            lat.append(it)
            ctx.append(None)
            wts.append(None)
    shapes = {tuple(x.shape) for x in lat}
    if len(shapes) != 1:
        raise ValueError(f"a batch mixes latent shapes {sorted(shapes)}; use the BucketSampler")
    latents = torch.stack(lat)
    context = _collate_context(ctx)
    if all(w is None for w in wts):
        return latents, context
    present = [w for w in wts if w is not None]
    if len(present) != len(wts):
        raise ValueError("some items have a loss weight and others do not")
    return latents, context, torch.stack(present)


def _collate_context(ctx: list):
    present = [c for c in ctx if c is not None]
    if not present:
        return None
    if len(present) != len(ctx):
        raise ValueError("some items have a context and others do not")
    if len({tuple(c.shape) for c in present}) == 1:
        return torch.stack(present)
    return present


def _dataset_shapes(dataset) -> list:
    shapes = getattr(dataset, "shapes", None)
    if shapes is not None:
        return list(shapes)
    out = []
    for i in range(len(dataset)):
        item = dataset[i]
        lat = item["latent"] if isinstance(item, dict) else (item[0] if isinstance(item, (tuple, list)) else item)
        out.append(tuple(lat.shape[1:]))
    return out


def _to(x, device):
    if x is None:
        return None
    if isinstance(x, list):
        return [c.to(device) for c in x]
    return x.to(device)


def _micro_generator(seed: int, micro: int, rank: int, world: int) -> torch.Generator:
    # one independent, reproducible stream per (micro-step, rank): resume needs no RNG state
    return torch.Generator().manual_seed((seed * 0x9E3779B1 + micro * world + rank) % (2 ** 63 - 1))


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "module", model)


def _compile_dit_blocks(model: torch.nn.Module, device: torch.device) -> bool:
    """Compile the blocks of the (first) Wan DiT inside ``model``; False where compile is unavailable (warned)."""
    from ..dit.model import WanDiT
    from ..memory import compile_blocks

    dit = next((m for m in model.modules() if isinstance(m, WanDiT)), None)
    if dit is None:
        raise ValueError(f"TrainConfig.compile_blocks: the model ({type(_unwrap(model)).__name__}) holds no WanDiT "
                         "whose blocks could be compiled")
    return not compile_blocks(dit, device=device)


def evaluation_loss(model, latents: torch.Tensor, context=None, *, draws: int = 8, seed: int = 0,
                    mean: float = 0.0, std: float = 1.0, shift: float = 1.0) -> float:
    """Mean flow-matching loss over ``draws`` fixed (noise, t) draws; deterministic for a given seed.

    latents: [B, C, F, H, W]. Useful to compare a model before and after training on equal terms.
    """
    g = torch.Generator().manual_seed(seed)
    total = 0.0
    with torch.no_grad():
        for _ in range(draws):
            total += float(flow_matching_loss(model, latents, context, mean=mean, std=std, shift=shift,
                                              generator=g))
    return total / draws


def learning_rate(cfg: TrainConfig, step: int) -> float:
    """Learning rate for optimizer step ``step`` (0-based): linear warmup, then constant or cosine."""
    if cfg.warmup_steps > 0 and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "cosine" and cfg.max_steps > cfg.warmup_steps:
        progress = (step - cfg.warmup_steps) / (cfg.max_steps - cfg.warmup_steps)
        floor = cfg.lr * cfg.min_lr_ratio
        return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return cfg.lr


# ------------------------------------------------------------------------------------------------------
CHECKPOINT_MARKER = ".wancore_checkpoint"  # written into every checkpoint folder; only those are ever replaced


class CheckpointFolderError(FileExistsError):
    """The target of ``save_checkpoint`` exists but is not a checkpoint it wrote; nothing was deleted."""


def is_saved_checkpoint(directory: str) -> bool:
    """True for a real folder (not a link) holding the marker ``save_checkpoint`` writes."""
    return (os.path.isdir(directory) and not os.path.islink(directory)
            and os.path.isfile(os.path.join(directory, CHECKPOINT_MARKER)))


def save_checkpoint(directory: str, model, optimizer, state: dict, ema: Optional[dict] = None) -> str:
    """Write ``model.safetensors``, ``optimizer.pt``, ``trainer_state.json`` (and ``ema.safetensors`` when an
    ``ema`` dict is given) atomically into ``directory``.

    The files are written into a fresh temporary folder beside ``directory`` and renamed into place. An
    existing ``directory`` is replaced only if it is a checkpoint this function wrote (it holds
    ``CHECKPOINT_MARKER``) or an empty folder; anything else raises ``CheckpointFolderError`` and is left as
    it is, so a mistyped path can never delete someone's data.
    """
    from safetensors.torch import save_file, save_model

    directory = os.path.normpath(os.fspath(directory))
    if os.path.lexists(directory):
        _check_replaceable(directory)
    tmp = _fresh_name(directory, "tmp")
    os.mkdir(tmp)  # fails rather than reuse anything that exists; ours alone from here on
    old = None
    try:
        save_model(_unwrap(model), os.path.join(tmp, "model.safetensors"))
        torch.save(optimizer.state_dict(), os.path.join(tmp, "optimizer.pt"))
        if ema is not None:
            save_file({k: v.detach().contiguous() for k, v in ema.items()}, os.path.join(tmp, EMA_FILE))
        with open(os.path.join(tmp, "trainer_state.json"), "w", encoding="utf-8") as f:
            json.dump(state, f, indent=1)
        with open(os.path.join(tmp, CHECKPOINT_MARKER), "w", encoding="utf-8") as f:
            f.write("written by wan_core.train.save_checkpoint; the folder may be replaced by the next save\n")
        if os.path.lexists(directory):
            _check_replaceable(directory)  # again, right before touching it
            if os.path.isdir(directory) and not os.listdir(directory):
                os.rmdir(directory)  # fails (and deletes nothing) if a file appeared meanwhile
            else:
                old = _fresh_name(directory, "old")
                os.rename(directory, old)  # the old checkpoint moves aside whole, deleted once the new is in
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not os.path.lexists(directory):
            os.rename(old, directory)  # put the previous checkpoint back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return directory


def _fresh_name(directory: str, what: str) -> str:
    return f"{directory}.{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _check_replaceable(directory: str) -> None:
    if os.path.islink(directory) or not os.path.isdir(directory):
        what = "a link" if os.path.islink(directory) else "a file"
        raise CheckpointFolderError(f"{directory}: exists and is {what}, not a checkpoint folder; refusing to "
                                    f"replace it. Choose a new folder for the checkpoint")
    if not is_saved_checkpoint(directory) and os.listdir(directory):
        raise CheckpointFolderError(
            f"{directory}: the folder exists and was not written by save_checkpoint (no {CHECKPOINT_MARKER} "
            f"in it); refusing to replace it. Choose a new or empty folder, or move this one away")


def load_checkpoint(directory: str, model, optimizer=None, device=None) -> dict:
    """Load a checkpoint written by :func:`save_checkpoint`; returns the trainer state dict."""
    from safetensors.torch import load_model

    for name in ("model.safetensors", "trainer_state.json"):
        if not os.path.exists(os.path.join(directory, name)):
            raise FileNotFoundError(f"{directory!r} is not a training checkpoint: {name} is missing")
    missing, unexpected = load_model(_unwrap(model), os.path.join(directory, "model.safetensors"), strict=False,
                                     device=str(device) if device is not None else "cpu")
    if missing or unexpected:
        raise RuntimeError(f"checkpoint {directory!r} does not fit the model: missing {sorted(missing)[:5]}, "
                           f"unexpected {sorted(unexpected)[:5]}")
    if optimizer is not None:
        opt_state = torch.load(os.path.join(directory, "optimizer.pt"), map_location=device or "cpu",
                               weights_only=True)
        optimizer.load_state_dict(opt_state)
    with open(os.path.join(directory, "trainer_state.json"), "r", encoding="utf-8") as f:
        return json.load(f)


def load_ema(directory: str) -> Optional[dict]:
    """The parameter average ``ema.safetensors`` of a checkpoint written by :func:`save_checkpoint`, or None."""
    from safetensors.torch import load_file

    path = os.path.join(directory, EMA_FILE)
    return load_file(path) if os.path.exists(path) else None


def latest_checkpoint(checkpoint_dir: Optional[str]) -> Optional[str]:
    """The ``step_N`` directory with the largest N in ``checkpoint_dir``, or None."""
    if not checkpoint_dir or not os.path.isdir(checkpoint_dir):
        return None
    best = None
    for name in os.listdir(checkpoint_dir):
        m = _CKPT_RE.match(name)
        if m and os.path.exists(os.path.join(checkpoint_dir, name, "trainer_state.json")):
            if best is None or int(m.group(1)) > best[0]:
                best = (int(m.group(1)), name)
    return None if best is None else os.path.join(checkpoint_dir, best[1])


def _prune(checkpoint_dir: str, keep_last: int) -> None:
    if keep_last <= 0:
        return
    found = sorted((int(m.group(1)), n) for n in os.listdir(checkpoint_dir) if (m := _CKPT_RE.match(n))
                   and is_saved_checkpoint(os.path.join(checkpoint_dir, n)))  # never a folder we did not write
    for _, name in found[:-keep_last]:
        shutil.rmtree(os.path.join(checkpoint_dir, name), ignore_errors=True)


# ------------------------------------------------------------------------------------------------------
def train(
    model: torch.nn.Module,
    dataset: Dataset,
    config: TrainConfig,
    *,
    shapes: Optional[Sequence] = None,
    collate_fn: Callable = collate_latents,
    device: Union[str, torch.device, None] = None,
    resume: Union[str, None] = None,
    optimizer: Optional[torch.optim.Optimizer] = None,
    interrupt: Optional[Callable[[], bool]] = None,
    process_group=None,
    sharded_grads: Optional[bool] = None,
) -> TrainResult:
    """Train ``model(x [B,C,F,H,W], timestep [B] on 0..1000, context) -> v`` with the flow-matching loss.

    dataset[i] -> ``(latent [C,F,H,W], context [L,D] or None)`` or a dict with those keys (and optionally
    ``weight``, per-element loss weights, see ``flow_matching_loss``); latents are the normalised latents the
    model sees. shapes: per-item bucket keys (default ``dataset.shapes`` or read
    from the items). resume: None (fresh), "latest" (newest ``step_N`` in ``config.checkpoint_dir``, fresh
    if none) or a checkpoint directory; a spike marker in ``checkpoint_dir`` moves the data position past
    the bad batch. interrupt: called after every optimizer step; True (on any rank) saves a checkpoint
    (if a directory is set) and returns with ``interrupted=True``; pass it on every rank or on none. Under
    torch.distributed the sampler splits data by rank (wrap the model in DDP/FSDP yourself;
    ``process_group``/``sharded_grads`` reach the clipper).
    Raises :class:`GradientSpikeError` on an extreme gradient spike (marker written first).
    """
    from tqdm.auto import tqdm

    cfg = config
    dist = torch.distributed
    distributed = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size(process_group) if distributed else 1
    rank = dist.get_rank(process_group) if distributed else 0
    is_main = rank == 0
    if device is None:
        device = next(model.parameters()).device
    device = torch.device(device)

    if cfg.checkpoint_dir and any(type(p).__name__ == "DTensor" for p in model.parameters()):
        raise NotImplementedError(
            "checkpointing an FSDP2 (DTensor) model is not supported by this loop (it writes one full "
            "safetensors file); use torch.distributed.checkpoint, or train without checkpoint_dir")
    if optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.adam_eps,
                                      weight_decay=cfg.weight_decay, fused=cfg.fused_adamw or None)
    marker_path = os.path.join(cfg.checkpoint_dir, SPIKE_MARKER_NAME) if cfg.checkpoint_dir else None
    clipper = None
    if cfg.adaptive_clip:
        clipper = AdaptiveGradClipper(decay=cfg.clip_decay, extreme_floor=cfg.clip_extreme_floor,
                                      first_cap=cfg.clip_first_cap, marker_path=marker_path,
                                      sharded=sharded_grads, process_group=process_group)

    # ---- resume
    step = data_step = 0
    ckpt = None
    if resume == "latest":
        ckpt = latest_checkpoint(cfg.checkpoint_dir)
    elif resume:
        ckpt = resume
    if ckpt is not None:
        state = load_checkpoint(ckpt, model, optimizer, device=device)
        step, data_step = int(state["step"]), int(state["data_step"])
        if int(state.get("world_size", world)) != world:
            warnings.warn(f"checkpoint {ckpt!r} was written with world size {state.get('world_size')}, resuming "
                          f"with {world}: the data order differs from an uninterrupted run", stacklevel=2)
        if clipper is not None and state.get("clipper") is not None:
            clipper.load_state_dict(state["clipper"])
    ema = _start_ema(model, ckpt, step) if cfg.ema_decay > 0 else None
    compiled = _compile_dit_blocks(model, device) if cfg.compile_blocks else False
    marker = read_spike_marker(marker_path) if (marker_path and resume) else None
    if marker is not None and marker.get("resume_data_step") is not None:
        data_step = max(data_step, int(marker["resume_data_step"]))

    # ---- data
    if shapes is None:
        shapes = _dataset_shapes(dataset)
    sampler = BucketSampler(shapes, cfg.batch_size, num_replicas=world, rank=rank, seed=cfg.seed,
                            grad_accum=cfg.grad_accum, same_shape_across_ranks=cfg.same_shape_across_ranks)
    sampler.resume(data_step)

    def micro_batches():
        while True:
            loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, collate_fn=collate_fn,
                                num_workers=cfg.num_workers)
            yield from loader
            sampler.set_epoch(sampler.epoch + 1)

    stream = micro_batches()

    def autocast():
        if cfg.precision == "bf16":
            return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def stop_requested() -> bool:
        flag = bool(interrupt is not None and interrupt())
        if distributed:   # every rank must stop at the same step
            t = torch.tensor([1.0 if flag else 0.0], device=device if dist.get_backend(process_group) == "nccl"
                             else "cpu")
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=process_group)
            flag = bool(t.item() > 0)
        return flag

    result = TrainResult(step=step, data_step=data_step, compiled=compiled)
    saved_at = [step if ckpt is not None else None]

    def checkpoint_now():
        if not cfg.checkpoint_dir:
            return None
        saved_at[0] = step
        path = os.path.join(cfg.checkpoint_dir, f"step_{step:08d}")
        if is_main:
            os.makedirs(cfg.checkpoint_dir, exist_ok=True)
            save_checkpoint(path, model, optimizer, {
                "step": step, "data_step": data_step,
                "clipper": clipper.state_dict() if clipper is not None else None,
                "config": {k: v for k, v in asdict(cfg).items()}, "world_size": world,
            }, ema=ema)
            _prune(cfg.checkpoint_dir, cfg.keep_last)
            m = read_spike_marker(marker_path) if marker_path else None
            if m is not None and m.get("resume_data_step") is not None and m["resume_data_step"] <= data_step:
                clear_spike_marker(marker_path)
        if distributed:
            dist.barrier(process_group)
        return path

    model.train()
    bar = tqdm(total=cfg.max_steps, initial=step, disable=not (cfg.progress and is_main), desc="train",
               dynamic_ncols=True)
    try:
        while step < cfg.max_steps:
            lr = learning_rate(cfg, step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for j in range(cfg.grad_accum):
                latents, context, *weight = next(stream)  # a third entry: per-element loss weights
                latents, context = _to(latents, device), _to(context, device)
                w = _to(weight[0], device) if weight else None
                gen = _micro_generator(cfg.seed, data_step * cfg.grad_accum + j, rank, world)
                sync = (j == cfg.grad_accum - 1) or not hasattr(model, "no_sync")
                # no_sync exists on the DDP wrapper the caller may pass; nn.Module does not declare it
                with (contextlib.nullcontext() if sync else cast(Any, model).no_sync()):
                    with autocast(), sdpa_kernels(cfg.attention_kernel):
                        loss = flow_matching_loss(model, latents, context, mean=cfg.timestep_mean,
                                                  std=cfg.timestep_std, shift=cfg.timestep_shift, generator=gen,
                                                  weight=w)
                    (loss / cfg.grad_accum).backward()
                step_loss += float(loss.detach()) / cfg.grad_accum
            if clipper is not None:
                clip = clipper.clip_(model, step=data_step)
                norm, status = clip.grad_norm, clip.status
            else:
                if not math.isfinite(step_loss):
                    raise FloatingPointError(f"loss is {step_loss} at data step {data_step} (adaptive clipping, "
                                             "which would stop with a resumable marker, is off)")
                norm, status = float("nan"), "off"
            optimizer.step()
            if ema is not None:
                _update_ema(ema, model, step, cfg.ema_decay)
            step += 1
            data_step += 1
            result.losses.append(step_loss)
            result.grad_norms.append(norm)
            result.clip_status.append(status)
            if clipper is not None:
                tau = clipper.thresholds()[0]
                bar.set_postfix(loss=f"{step_loss:.4g}", gnorm=f"{norm:.3g}",
                                clip_at=f"{tau:.3g}" if math.isfinite(tau) else "-", n_clip=clipper.num_clipped)
            else:
                bar.set_postfix(loss=f"{step_loss:.4g}")
            bar.update(1)
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                result.checkpoint = checkpoint_now()
            if interrupt is not None and stop_requested():
                result.interrupted = True
                break
    finally:
        bar.close()
    result.step, result.data_step = step, data_step
    result.ema = ema
    if saved_at[0] != step:
        result.checkpoint = checkpoint_now()
    return result


def _start_ema(model, ckpt: Optional[str], step: int) -> dict:
    """The average to continue: the checkpoint's, or (fresh run, or a checkpoint saved without one) the
    current parameters."""
    params = dict(_unwrap(model).named_parameters())
    saved = load_ema(ckpt) if ckpt is not None else None
    if saved is not None:
        if set(saved) != set(params):
            raise RuntimeError(f"checkpoint {ckpt!r}: {EMA_FILE} does not fit the model (parameter names differ)")
        return {k: saved[k].to(device=params[k].device, dtype=torch.float32) for k in params}
    if ckpt is not None and step > 0:
        warnings.warn(f"checkpoint {ckpt!r} has no {EMA_FILE}; the parameter average restarts from its weights",
                      stacklevel=3)
    return {k: p.detach().to(torch.float32).clone() for k, p in params.items()}


@torch.no_grad()
def _update_ema(ema: dict, model, step: int, decay: float) -> None:
    d = min(decay, (1.0 + step) / (10.0 + step))
    for name, p in _unwrap(model).named_parameters():
        ema[name].lerp_(p.detach().to(torch.float32), 1.0 - d)
