"""Process groups of context parallelism (docs/parallel.md section 1).

Global rank layout (``world = windows * cfg * ring * ulysses * replicas``)::

    rank = (((replica * windows + window_rank) * cfg + cfg_rank) * ring + ring_rank) * ulysses + ulysses_rank

Ulysses groups are contiguous ranks (fast intra-node all-to-all), ring groups are strided by ``ulysses`` (P2P
across nodes), the sequence-parallel group (``sp = ulysses * ring``) is contiguous, and the two CFG ranks of
a pair are ``sp`` apart. The sequence is cut into ``sp`` contiguous chunks in sequence-parallel rank order.
Context windows (docs/long_video.md) are the outermost axis: each of the ``windows`` window ranks is a whole
``cfg * ring * ulysses`` model replica that samples its share of each step's windows; the window group joins
the ranks with the same (cfg, ring, ulysses) coordinates, ``cfg * sp`` apart (one all-gather per step).
"""
from __future__ import annotations

import datetime
import math
from dataclasses import dataclass

import torch.distributed as dist


@dataclass(frozen=True)
class ParallelConfig:
    """Degrees: ``ulysses`` (all-to-all over heads; must divide the head count), ``ring`` (K/V rotation),
    ``cfg`` (1, or 2 = cond and uncond on different ranks), ``windows`` (context windows of a step spread over
    that many model replicas). Processes needed: ``ulysses * ring * cfg * windows``."""

    ulysses: int = 1
    ring: int = 1
    cfg: int = 1
    windows: int = 1

    def __post_init__(self):
        for name in ("ulysses", "ring", "cfg", "windows"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} degree must be an int >= 1, got {v!r}")
        if self.cfg not in (1, 2):
            raise ValueError(f"cfg degree must be 1 or 2 (cond and uncond on different ranks), got {self.cfg}")

    @property
    def sp(self) -> int:
        """Sequence-parallel degree ``ulysses * ring``."""
        return self.ulysses * self.ring

    @property
    def model_size(self) -> int:
        """Processes of one model replica (one window rank): ``ulysses * ring * cfg``."""
        return self.sp * self.cfg

    @property
    def world_size(self) -> int:
        return self.model_size * self.windows

    def describe(self) -> str:
        spread = f" x windows {self.windows}" if self.windows > 1 else ""
        return f"ulysses {self.ulysses} x ring {self.ring} x cfg {self.cfg}{spread}"


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def valid_layouts(devices: int, num_heads: int, cfg: int = 1, windows: int = 1) -> list[tuple[int, int]]:
    """``(ulysses, ring)`` pairs that use exactly ``devices`` processes with these cfg and windows degrees."""
    if devices % (cfg * windows):
        return []
    sp = devices // (cfg * windows)
    return [(u, sp // u) for u in divisors(sp) if num_heads % u == 0]


def check_degrees(config: ParallelConfig, devices: int, num_heads: int) -> None:
    """One-line ``ValueError`` naming the valid choices when ``config`` does not fit ``devices`` processes and a
    model with ``num_heads`` attention heads."""
    if num_heads % config.ulysses:
        valid = [d for d in divisors(num_heads) if d <= max(devices, 1)] or [1]
        raise ValueError(f"ulysses={config.ulysses} does not divide the model's {num_heads} attention heads; "
                         f"valid ulysses degrees: {', '.join(map(str, valid))} (use ring for the rest)")
    if config.world_size != devices:
        layouts = valid_layouts(devices, num_heads, config.cfg, config.windows)
        spread = f" and windows {config.windows}" if config.windows > 1 else ""
        none = "none with these cfg and windows degrees" if spread else "none with this cfg degree"
        choices = ", ".join(f"ulysses={u} ring={r}" for u, r in layouts) or none
        raise ValueError(f"{config.describe()} = {config.world_size} processes but {devices} devices; "
                         f"for {devices} devices with cfg {config.cfg}{spread}: {choices}")


@dataclass
class ParallelGroups:
    """This rank's groups and coordinates (``build_groups``). Group fields are None for a degree of 1."""

    config: ParallelConfig
    rank: int
    ulysses_group: dist.ProcessGroup | None
    ring_group: dist.ProcessGroup | None
    sp_group: dist.ProcessGroup | None
    cfg_group: dist.ProcessGroup | None
    ulysses_rank: int
    ring_rank: int
    cfg_rank: int
    window_group: dist.ProcessGroup | None = None
    window_rank: int = 0

    @property
    def sp_rank(self) -> int:
        """Index of this rank's sequence chunk."""
        return self.ring_rank * self.config.ulysses + self.ulysses_rank


def layout(config: ParallelConfig, rank: int) -> tuple[int, int, int, int]:
    """``(model replica, cfg_rank, ring_rank, ulysses_rank)`` of a global rank; the window rank is
    ``model replica % windows``."""
    u, r, c = config.ulysses, config.ring, config.cfg
    return rank // (u * r * c), rank // (u * r) % c, rank // u % r, rank % u


def build_groups(config: ParallelConfig, world_size: int | None = None, rank: int | None = None,
                 timeout_s: float | None = None) -> ParallelGroups:
    """Create every group of the layout (collective: all ranks of the default group call it, in the same
    order) and return this rank's. ``world_size`` must be a multiple of ``config.world_size``; extra factors
    are independent replicas doing the same work. ``timeout_s``: collective timeout of the new groups."""
    world = dist.get_world_size() if world_size is None else world_size
    me = dist.get_rank() if rank is None else rank
    if world % config.world_size:
        raise ValueError(f"{config.describe()} needs a multiple of {config.world_size} processes, "
                         f"the group has {world}")
    u, r, c = config.ulysses, config.ring, config.cfg
    sp = u * r
    mine: dict[str, dist.ProcessGroup | None] = {"ulysses": None, "ring": None, "sp": None, "cfg": None,
                                                 "windows": None}

    def make(kind: str, ranks: list[int]) -> None:
        # every rank calls new_group for every group
        g = dist.new_group(ranks, timeout=None if timeout_s is None else datetime.timedelta(seconds=timeout_s))
        if me in ranks:
            mine[kind] = g

    for base in range(0, world, sp):  # one sequence-parallel replica per (replica, cfg rank)
        if u > 1:
            for i in range(r):
                make("ulysses", [base + i * u + j for j in range(u)])
        if r > 1:
            for j in range(u):
                make("ring", [base + i * u + j for i in range(r)])
        if u > 1 and r > 1:
            make("sp", list(range(base, base + sp)))
    if c > 1:
        for base in range(0, world, sp * c):
            for j in range(sp):
                make("cfg", [base + j, base + sp + j])
    if config.windows > 1:
        model = sp * c
        for base in range(0, world, config.world_size):
            for j in range(model):
                make("windows", [base + w * model + j for w in range(config.windows)])
    if u > 1 and r == 1:
        mine["sp"] = mine["ulysses"]
    elif r > 1 and u == 1:
        mine["sp"] = mine["ring"]
    replica, cfg_rank, ring_rank, ulysses_rank = layout(config, me)
    return ParallelGroups(config, me, mine["ulysses"], mine["ring"], mine["sp"], mine["cfg"],
                          ulysses_rank, ring_rank, cfg_rank, mine["windows"], replica % config.windows)


def padded_length(length: int, multiple: int) -> int:
    """``length`` rounded up to a multiple of ``multiple``."""
    return math.ceil(length / multiple) * multiple
