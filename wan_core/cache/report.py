"""What a cached sampling run did: DiT evaluations computed and skipped per branch and step, attention reuse.

A "DiT evaluation" is one CFG branch's pass through the model at one step (a batched cond+uncond forward is
two). Statuses: ``computed``; ``estimated`` (the CFG cache derived the unconditional velocity from the
conditional one); ``reused`` (TeaCache / MagCache reused the block-stack residual, EasyCache the whole output).
"DiT work" weighs every computed block by its FLOPs at the run's token count, a block whose self-attention
output was reused counting ``1 - share`` (``attention_share``), so attention reuse and skipped passes add up
in one number.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .calibration import Calibration

__all__ = ["COMPUTED", "ESTIMATED", "REUSED", "CacheReport", "attention_share"]

COMPUTED, ESTIMATED, REUSED = "computed", "estimated", "reused"


def attention_share(dim: int, ffn_dim: int, tokens: int, text_tokens: int = 512) -> float:
    """Fraction of a Wan block's FLOPs spent in its self-attention module (q/k/v/o projections and the
    attention itself) for ``tokens`` video tokens: ``(4 L^2 D + 8 L D^2) / block``, the block adding the
    cross-attention (q/o projections and attention over the text; text K/V cached) and the FFN
    (``4 L D F``). Matches ``wan_core.estimate``'s per-step terms."""
    length, d = float(tokens), float(dim)
    self_attn = 4 * length * length * d + 8 * length * d * d
    cross = 4 * length * d * d + 4 * length * text_tokens * d
    ffn = 4 * length * d * ffn_dim
    return self_attn / (self_attn + cross + ffn)


@dataclass
class CacheReport:
    """Filled during one sampling run. ``branches``: the passes a step needs ("cond", "uncond" or both)."""

    preset: str
    steps: int
    branches: tuple[str, ...]
    num_layers: int = 0
    status: list[dict[str, str]] = field(default_factory=list)
    attention: list[dict[str, list[int]]] = field(default_factory=list)  # per step: branch -> [computed, reused]
    text_kv_computed: int = 0   # prompt batches whose cross-attention K/V were computed
    text_kv_reused: int = 0     # forwards that reused them
    tokens: int = 0
    dim: int = 0
    ffn_dim: int = 0
    text_len: int = 512
    calibration: Calibration | None = None  # after a "calibrate" run

    def __post_init__(self):
        self.status = [{} for _ in range(self.steps)]
        self.attention = [{} for _ in range(self.steps)]

    # ---------------------------------------------------------------- recording
    def mark(self, step: int, branch: str, status: str) -> None:
        if 0 <= step < self.steps:
            self.status[step][branch] = status

    def count_attention(self, step: int, branch: str, computed: int, reused: int) -> None:
        if 0 <= step < self.steps:
            c = self.attention[step].setdefault(branch, [0, 0])
            c[0] += computed
            c[1] += reused

    # ---------------------------------------------------------------- totals
    @property
    def total(self) -> int:
        return self.steps * len(self.branches)

    def count(self, status: str, branch: str | None = None) -> int:
        return sum(1 for s in self.status for b, v in s.items() if v == status and (branch is None or b == branch))

    @property
    def computed(self) -> int:
        return self.count(COMPUTED)

    @property
    def skipped(self) -> int:
        return self.total - self.computed

    @property
    def attention_computed(self) -> int:
        return sum(c[0] for s in self.attention for c in s.values())

    @property
    def attention_reused(self) -> int:
        return sum(c[1] for s in self.attention for c in s.values())

    def work(self, share: float | None = None) -> float:
        """DiT work done as a fraction of the uncached run's (1.0 = no saving). ``share``: the self-attention
        share of a block (default: ``attention_share`` at this run's widths and token count)."""
        if share is None:
            share = attention_share(self.dim, self.ffn_dim, self.tokens, self.text_len) if self.tokens else 0.0
        layers = max(self.num_layers, 1)
        done = self.computed * layers - self.attention_reused * share
        return done / (self.total * layers) if self.total else 1.0

    # ---------------------------------------------------------------- text
    def line(self) -> str:
        """``cache <preset>: <computed>/<total> DiT evaluations`` (scripts parse this line)."""
        return f"cache {self.preset}: {self.computed}/{self.total} DiT evaluations"

    def details(self) -> str:
        """One line of detail: per-branch counts, attention reuse, text-KV reuse and the DiT work fraction."""
        parts = []
        for b in self.branches:
            n_c, n_e, n_r = self.count(COMPUTED, b), self.count(ESTIMATED, b), self.count(REUSED, b)
            extra = ", ".join(f"{n} {what}" for n, what in ((n_e, "estimated"), (n_r, "reused")) if n)
            parts.append(f"{b} {n_c}/{self.steps} computed" + (f" ({extra})" if extra else ""))
        if self.attention_reused:
            blocks = self.attention_computed + self.attention_reused
            parts.append(f"self-attention reused in {self.attention_reused}/{blocks} block evaluations")
        if self.text_kv_computed:
            parts.append(f"text K/V computed {self.text_kv_computed}x, reused {self.text_kv_reused}x")
        parts.append(f"DiT work {100 * self.work():.0f}% of uncached")
        return "; ".join(parts)

    def per_step(self) -> str:
        """One line per step: ``step  3: cond computed (attention 0/30 reused), uncond estimated``."""
        lines = []
        for i, (status, attn) in enumerate(zip(self.status, self.attention)):
            items = []
            for b in self.branches:
                s = status.get(b, "-")
                a = attn.get(b)
                items.append(f"{b} {s}" + (f" (attention {a[1]}/{a[0] + a[1]} reused)" if a and a[1] else ""))
            lines.append(f"step {i:3d}: " + ", ".join(items))
        return "\n".join(lines)

    def text(self) -> str:
        """The summary line, the details, and a calibration's JSON when there is one (the node shows this)."""
        out = [self.line(), self.details()]
        if self.calibration is not None:
            out.append("calibration (paste into the calibration input of the cache node of this run): "
                       + self.calibration.to_json())
        return "\n".join(out)


class WindowCacheReport:
    """The cache reports of a context-windowed run (one session per window) read as one: evaluations summed over
    the windows (``line()`` keeps ``CacheReport.line``'s form, which scripts parse)."""

    def __init__(self, reports: dict):
        self.reports = reports  # window (frame indices) -> CacheReport or MoECacheReport

    def _all(self) -> list:
        out: list = []
        for r in self.reports.values():
            out.extend(getattr(r, "reports", {"": r}).values())
        return out

    @property
    def computed(self) -> int:
        return sum(r.computed for r in self._all())

    @property
    def total(self) -> int:
        """Evaluations the windows asked for (a sliding schedule runs some windows on some steps only)."""
        return sum(len(step) for r in self._all() for step in r.status)

    def line(self) -> str:
        preset = self._all()[0].preset if self._all() else "exact"
        return f"cache {preset}: {self.computed}/{self.total} DiT evaluations ({len(self.reports)} context windows)"

    def text(self) -> str:
        return "\n".join([self.line()] + [f"window {list(w)}: {r.line()}" for w, r in self.reports.items()])
