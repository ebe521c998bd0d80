"""The diffusion caches of a two-expert model: one session per expert, attached to that expert for the run, and
their reports read as one (docs/wan22.md section 4)."""
from __future__ import annotations

import contextlib
from typing import Any

from ..dit.moe import WanMoE


class MoECacheReport:
    """The two experts' cache reports as one (``text()`` as ``CacheReport.text``)."""

    def __init__(self, reports: dict[str, Any]):
        self.reports = reports

    def text(self) -> str:
        return "; ".join(f"{name}-noise expert: {r.text()}" for name, r in self.reports.items())

    def line(self) -> str:
        return "; ".join(f"{name}-noise expert: {r.line()}" for name, r in self.reports.items())


@contextlib.contextmanager
def attached(sessions: dict[str, Any], moe: WanMoE):
    """Each expert's cache session attached to that expert for the run."""
    with contextlib.ExitStack() as stack:
        for name, session in sessions.items():
            stack.enter_context(session.attached(moe.expert(name)))
        yield
