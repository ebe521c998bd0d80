"""Block swap with prefetch: N DiT blocks live on the offload device (pinned CPU memory) and are copied to the
compute device just before they run, P blocks ahead, then dropped (docs/memory.md).

The mechanism attaches from outside through forward hooks on the blocks, so the DiT stays plain and every
caller of a block (``WanDiT.run_blocks``, the diffusion caches, the SUV trainer) gets the same treatment. A
block moves as a whole ``nn.Module``: every parameter and buffer of every submodule, whatever its dtype (fp8
weights travel as fp8 with their scales) and whatever was added to it after the swap was set up (LoRA
patches, issue 13), so nothing has to register with the swap.

Copies run on a side CUDA stream (``non_blocking`` from pinned memory); the compute stream waits on an event
recorded after each block's copies, and each copied tensor is ``record_stream``-ed on the compute stream so
the allocator does not reuse its memory before the block's kernels finish. On the CPU (the CPU as both
devices) the same window logic runs with synchronous copies, which is how the tests exercise it.

Weights are read-only at inference, so dropping a block is free: its parameters point back at the offload
copy (no copy back). At most ``prefetch + 1`` swapped blocks are on the compute device at any time.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.nn as nn

from ..dit.runtime import runtime_of, update_runtime

__all__ = ["BlockSwap", "SwapStats", "check_swap_options", "enable_block_swap", "block_swap_of", "file_block_count"]


def check_swap_options(blocks_to_swap: int, prefetch: int, device: torch.device | str | None = None,
                       num_layers: int | None = None) -> str:
    """Validate block-swap options before any loading; raise ``ValueError`` with one line on a bad value.

    Returns "" when swapping will happen, or a one-line note when it is a no-op (``blocks_to_swap`` 0, or a
    CPU-only run: the blocks are already in CPU memory). ``device``: the compute device ("cuda", "cuda:1",
    "cpu"; None = cuda when present). ``num_layers``: the model's block count when known (40 for 14B, 30 for
    1.3B), to refuse a larger ``blocks_to_swap``.
    """
    if isinstance(blocks_to_swap, bool) or not isinstance(blocks_to_swap, int) or blocks_to_swap < 0:
        raise ValueError(f"blocks_to_swap must be an integer >= 0, got {blocks_to_swap!r}")
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
        raise ValueError(f"prefetch must be an integer >= 0 (blocks copied ahead; 1 is usual), got {prefetch!r}")
    if num_layers is not None and blocks_to_swap > num_layers:
        raise ValueError(f"blocks_to_swap={blocks_to_swap} exceeds the model's {num_layers} blocks; "
                         f"use at most {num_layers} (all blocks swapped)")
    if blocks_to_swap == 0:
        return ""
    dev = torch.device(device) if device is not None else (
        torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    if dev.type == "cpu":
        return (f"note: blocks_to_swap={blocks_to_swap} is a no-op on a CPU-only run (the blocks are already in "
                f"CPU memory)")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"blocks_to_swap={blocks_to_swap} with device {dev}: CUDA is not available on this "
                             f"machine; use device cpu (no swap needed) or run where a GPU is present")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {dev} is not present (this machine has {torch.cuda.device_count()} CUDA "
                             f"device(s): cuda:0..cuda:{torch.cuda.device_count() - 1})")
        return ""
    raise ValueError(f"block swap supports CUDA devices only, got device {dev}")


@dataclass
class SwapStats:
    """What the swap did: copies made, bytes moved to the compute device, the most swapped blocks resident at
    once (``max_resident`` <= ``prefetch + 1``) and the bytes of one block at most."""

    loads: int = 0
    bytes_in: int = 0
    max_resident: int = 0
    block_bytes: int = 0
    resident_log: list[int] = field(default_factory=list)  # resident count at each block start (tests)


def _tensors(module: nn.Module) -> Iterator[tuple[nn.Module, str, dict, torch.Tensor]]:
    """Every parameter and buffer of ``module`` and its submodules: (owner, name, owner's dict, tensor)."""
    for m in module.modules():
        for table in (m._parameters, m._buffers):
            for name, t in table.items():
                if t is not None:
                    yield m, name, table, t


def _set(table: dict, name: str, t: torch.Tensor, value: torch.Tensor) -> None:
    """Point a parameter or buffer at ``value`` (parameters keep their identity: ``.data`` is replaced)."""
    if isinstance(t, nn.Parameter):
        t.data = value
    else:
        table[name] = value


class _Copier:
    """Host -> device copies: on a side CUDA stream with events, or synchronous (CPU, same code path)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device=device) if self.cuda else None

    def copy(self, src: torch.Tensor) -> torch.Tensor:
        if self.stream is None:
            return src.to(self.device, copy=True)
        with torch.cuda.stream(self.stream):  # allocated and filled on the side stream
            return src.to(self.device, non_blocking=True, copy=True)

    def record(self) -> Any:
        if self.stream is None:
            return None
        event = torch.cuda.Event()
        event.record(self.stream)
        return event

    def wait(self, event: Any, tensors: Sequence[torch.Tensor]) -> None:
        """Make the compute stream wait for ``event`` and keep ``tensors`` alive for its kernels."""
        if event is None:
            return
        compute = torch.cuda.current_stream(self.device)
        compute.wait_event(event)
        for t in tensors:
            t.record_stream(compute)


class _Slot:
    """One swapped block: its offload tensors (pinned) and, while resident, its device tensors."""

    def __init__(self, index: int, block: nn.Module):
        self.index = index
        self.block = block
        self.offload: dict[tuple[int, str], torch.Tensor] = {}  # (id(owner), name) -> offload tensor
        self.device_tensors: list[torch.Tensor] = []
        self.event: Any = None
        self.waited = False
        self.resident = False


class BlockSwap:
    """Keep ``blocks_to_swap`` of ``model.blocks`` (the last ones) on ``offload_device`` and stream them in.

    ``model``: a WanDiT (anything with ``.blocks``, an ``nn.ModuleList``, and its other parameters already
    on or movable to ``device``). ``prefetch``: swapped blocks copied ahead of the one running (0 = copy
    each block when it starts). ``pin``: page-lock the offload copies (CUDA only; needed for asynchronous
    copies). ``place_resident``: move the other parts (embeddings, head, unswapped blocks) to ``device`` now;
    False leaves them where they are for a host that moves them itself (ComfyUI's model management through
    ``nodes/host.py``, which sees only them: :meth:`resident_modules`). Call :meth:`remove` to bring every
    block back to ``device`` and drop the hooks.
    """

    def __init__(self, model: nn.Module, blocks_to_swap: int, prefetch: int = 1,
                 device: torch.device | str = "cuda", offload_device: torch.device | str = "cpu",
                 pin: bool | None = None, place_resident: bool = True):
        blocks = getattr(model, "blocks", None)
        if not isinstance(blocks, nn.ModuleList):
            raise TypeError("block swap needs a model with a .blocks ModuleList (a WanDiT)")
        check_swap_options(blocks_to_swap, prefetch, None, len(blocks))
        self.model = model
        self._blocks: nn.ModuleList = blocks
        vace = getattr(model, "vace_blocks", None)
        self._vace: nn.ModuleList | None = vace if isinstance(vace, nn.ModuleList) else None
        self.device = torch.device(device)
        self.offload_device = torch.device(offload_device)
        self.prefetch = prefetch
        self.pin = (self.device.type == "cuda" and self.offload_device.type == "cpu") if pin is None else pin
        n = len(blocks)
        self.swapped = list(range(n - blocks_to_swap, n))
        # a VACE model's VACE blocks run first (docs/vace.md section 1); VACE block j travels with the main block
        # it feeds (vace_layers[j]), so the same share of both stays offloaded
        layers = tuple(getattr(getattr(model, "config", None), "vace_layers", ())) if self._vace is not None else ()
        self.vace_swapped = [j for j, layer in enumerate(layers) if layer in self.swapped]
        self._seq: list[nn.Module] = list(self._vace or []) + list(blocks)  # execution order
        nv = len(layers)
        self._positions = [j for j in self.vace_swapped] + [nv + i for i in self.swapped]
        self._text_order = list(range(nv, nv + n)) + list(range(nv))  # text_kv: main blocks, then VACE blocks
        self.stats = SwapStats()
        self._copier = _Copier(self.device)
        self._slots: dict[int, _Slot] = {}
        self._hooks: list[Any] = []
        self._place(model, place_resident)
        self._hook()
        # WanDiT.text_kv reads every block's cross-attention outside the blocks' forward (text-KV cache)
        if hasattr(model, "text_kv") and "text_kv" not in vars(model):
            vars(model)["text_kv"] = self._text_kv  # an instance attribute shadows the method
            self._patched_text_kv = True
        else:
            self._patched_text_kv = False
        update_runtime(model, block_swap=self)

    # --- placement -------------------------------------------------------------------------------------
    def _hook(self) -> None:
        for i, block in enumerate(self._seq):
            self._hooks.append(block.register_forward_pre_hook(self._make_pre(i)))
            if i in self._slots:
                self._hooks.append(block.register_forward_hook(self._make_post(i)))

    def _place(self, model: nn.Module, place_resident: bool) -> None:
        """Everything but the swapped blocks to ``device`` (``place_resident``); the swapped blocks to (pinned)
        offload memory, one tensor at a time so RAM never holds two copies of the model."""
        if place_resident:
            for module in self.resident_modules():
                module.to(self.device)
        for i, block in enumerate(self._seq):
            if i not in self._positions:
                continue
            slot = self._slots[i] = _Slot(i, block)
            size = 0
            for owner, name, table, t in _tensors(block):
                off = t.detach().to(self.offload_device)
                if self.pin and not off.is_pinned():
                    off = off.pin_memory()
                _set(table, name, t, off)
                slot.offload[(id(owner), name)] = off
                size += off.numel() * off.element_size()
            self.stats.block_bytes = max(self.stats.block_bytes, size)
        tables: tuple[dict[str, Any], ...] = (model._parameters, model._buffers)
        for table in tables if place_resident else ():  # tensors set directly on the model
            for key, value in table.items():
                if value is not None and value.device != self.device:
                    _set(table, key, value, value.detach().to(self.device))

    def resident_modules(self) -> list[nn.Module]:
        """The modules that stay on the compute device: every child of the model but the block lists, and the
        blocks not swapped."""
        return ([child for child in self.model.children() if child is not self._blocks and child is not self._vace]
                + [b for i, b in enumerate(self._seq) if i not in self._positions])

    # --- the window --------------------------------------------------------------------------------------
    def _window(self, i: int) -> list[int]:
        """Swapped blocks that should be resident when block ``i`` (a position in execution order) starts: ``i``
        itself if swapped, then the next ``prefetch`` swapped blocks after it (no wrap to the next call)."""
        ahead = [j for j in self._positions if j > i][: self.prefetch]
        return ([i] if i in self._slots else []) + ahead

    def _load(self, slot: _Slot) -> None:
        if slot.resident:
            return
        tensors = []
        homes: dict[tuple[int, str], torch.Tensor] = {}
        # while a block is offloaded, what it holds is its home: a LoRA merged or removed since the last load
        # (weights replaced, branches added or dropped) travels as it is now
        for owner, name, table, t in _tensors(slot.block):
            if t.device != self.offload_device:
                continue  # put on the compute device from outside: it stays there
            home = t.detach()
            if self.pin and not home.is_pinned():
                home = home.pin_memory()
                _set(table, name, t, home)
            homes[(id(owner), name)] = home
            dev = self._copier.copy(home)
            _set(table, name, t, dev)
            tensors.append(dev)
            self.stats.bytes_in += dev.numel() * dev.element_size()
        slot.offload = homes
        slot.device_tensors = tensors
        slot.event = self._copier.record()
        slot.waited = False
        slot.resident = True
        self.stats.loads += 1

    def _drop(self, slot: _Slot) -> None:
        if not slot.resident:
            return
        for owner, name, table, t in _tensors(slot.block):
            home = slot.offload.get((id(owner), name))
            if home is not None:
                _set(table, name, t, home)
        slot.device_tensors = []
        slot.event = None
        slot.resident = False

    def settle(self) -> None:
        """Point every swapped block back at its stored copy: after a run stopped inside a block (an error, an
        interruption) its working copy stays resident, and a weight change (a LoRA merged or restored) made
        there would be lost while the stored copy, which the next run brings back, kept the old weights."""
        for slot in self._slots.values():
            self._drop(slot)

    def resident(self) -> list[int]:
        """Positions (in execution order: a VACE model's VACE blocks first) of the swapped blocks now on the
        compute device."""
        return [i for i, s in self._slots.items() if s.resident]

    def _make_pre(self, i: int):
        def pre(module, args):
            window = self._window(i)
            for j, slot in self._slots.items():  # anything outside the window goes (also after an exception)
                if j not in window:
                    self._drop(slot)
            for j in window:
                self._load(self._slots[j])
            if i in self._slots:
                slot = self._slots[i]
                if not slot.waited:
                    self._copier.wait(slot.event, slot.device_tensors)
                    slot.waited = True
            count = len(self.resident())
            self.stats.max_resident = max(self.stats.max_resident, count)
            self.stats.resident_log.append(count)
            return None
        return pre

    def _make_post(self, i: int):
        def post(module, args, output):
            self._drop(self._slots[i])
            return None
        return post

    def _text_kv(self, ctx: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``WanDiT.text_kv`` with each swapped block brought in for its own cross-attention K/V (main blocks,
        then VACE blocks, as ``WanDiT.text_kv``)."""
        out = []
        for i in self._text_order:
            block = self._seq[i]
            slot = self._slots.get(i)
            if slot is not None:
                for j, other in self._slots.items():
                    if j != i:
                        self._drop(other)
                self._load(slot)
                self._copier.wait(slot.event, slot.device_tensors)
                slot.waited = True
            out.append(cast(Any, block).cross_attn.text_kv(ctx))
            if slot is not None:
                self._drop(slot)
        return out

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hooks inactive inside (e.g. to inspect the offloaded weights)."""
        hooks, self._hooks = self._hooks, []
        try:
            for h in hooks:
                h.remove()
            yield
        finally:
            self._hook()

    def remove(self, bring_back: bool = True) -> None:
        """Undo: hooks removed, ``model.text_kv`` restored and (``bring_back``) every block on ``device``;
        with ``bring_back=False`` the swapped blocks stay in offload memory (e.g. to release the model)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        for slot in self._slots.values():
            self._drop(slot)
            if bring_back:
                slot.block.to(self.device)
        self._slots = {}
        if self._patched_text_kv:
            del self.model.text_kv
        if runtime_of(self.model).block_swap is self:
            update_runtime(self.model, block_swap=None)

    def offload_bytes(self) -> int:
        """Bytes of the swapped blocks' offload copies (pinned RAM)."""
        return sum(t.numel() * t.element_size() for s in self._slots.values() for t in s.offload.values())

    def __repr__(self) -> str:
        vace = f" + {len(self.vace_swapped)} of {len(self._vace)} VACE blocks" if self._vace is not None else ""
        return (f"BlockSwap({len(self.swapped)} of {len(self._blocks)} blocks{vace}, "
                f"prefetch={self.prefetch}, {self.offload_device} -> {self.device})")


def file_block_count(src) -> int | None:
    """The block count of a DiT file from its header alone (None when it has no numbered blocks)."""
    from ..checkpoint import is_quant_aux_key
    from ..dit.loader import official_state_dict

    sd = official_state_dict(src)
    return len({k.split(".")[1] for k in sd if k.startswith("blocks.") and not is_quant_aux_key(k)}) or None


def block_swap_of(model: nn.Module) -> BlockSwap | None:
    """The :class:`BlockSwap` attached to ``model``, if any."""
    return runtime_of(model).block_swap


def enable_block_swap(model: nn.Module, blocks_to_swap: int, prefetch: int = 1,
                      device: torch.device | str | None = None, offload_device: torch.device | str = "cpu",
                      pin: bool | None = None, place_resident: bool = True) -> BlockSwap | None:
    """Attach a :class:`BlockSwap` (replacing any earlier one); None when ``blocks_to_swap`` is 0.

    ``device``: the compute device (None = cuda when present, else cpu). A previous swap is removed first.
    """
    old = block_swap_of(model)
    if old is not None:
        old.remove()
    if blocks_to_swap == 0:
        return None
    dev = device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    return BlockSwap(model, blocks_to_swap, prefetch, dev, offload_device, pin, place_resident)
