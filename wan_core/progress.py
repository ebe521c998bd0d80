"""Progress and interruption: one contract for every long operation (sampling, VAE, text encoding, loading).

Long loops take two optional callables and call them between units of work (a step, a latent frame, a batch
of prompts, a tensor):

- ``progress(done, total)``: ``done`` units of ``total`` are finished (``ProgressFn``);
- ``interrupt()``: asked before each unit; a true result stops the work with ``Interrupted``. It may also
  raise its own exception (ComfyUI's ``throw_exception_if_processing_interrupted`` does), which propagates.

Sampling additionally offers a per-step observer, ``StepCallback``, that sees the sample and its data
estimate (for previews); it is a different thing from progress and is named differently.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["InterruptFn", "Interrupted", "ProgressCounter", "ProgressFn", "StepCallback", "check_interrupt"]

ProgressFn = Callable[[int, int], None]
InterruptFn = Callable[[], object]
# step_callback(step, total, x, x0_hat): step = steps done (1..total), x = sample after it, x0_hat = its data estimate
StepCallback = Callable[[int, int, torch.Tensor, torch.Tensor], None]


class Interrupted(Exception):
    """The user stopped ``what`` before unit ``done`` (0-based) of ``total``; work finished before is kept."""

    def __init__(self, what: str = "work", done: int | None = None, total: int | None = None):
        where = f" before {done + 1} of {total}" if done is not None and total is not None else ""
        super().__init__(f"{what} interrupted{where}")
        self.what, self.done, self.total = what, done, total


def check_interrupt(interrupt: InterruptFn | None, what: str, done: int | None = None,
                    total: int | None = None) -> None:
    """Ask ``interrupt()``; raise ``Interrupted`` when it answers true."""
    if interrupt is not None and interrupt():
        raise Interrupted(what, done, total)


class ProgressCounter:
    """Counts units over a whole call (every batch item and tile) and reports ``progress(done, total)``."""

    def __init__(self, fn: ProgressFn | None, total: int):
        self.fn, self.total, self.done = fn, total, 0

    def step(self, n: int = 1) -> None:
        self.done += n
        if self.fn is not None:
            self.fn(self.done, self.total)
