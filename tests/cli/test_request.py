"""The command line's shape: one frozen ``GenerateRequest`` whose defaults come from ``wan_core.variants``, the
parser's copies of torch-side choice tuples equal to the library's, and no ``getattr(args, ...)`` anywhere."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import get_args

import pytest

from wan_core import variants
from wan_core.cli import parser
from wan_core.cli.request import GenerateRequest, resolve

ROOT = Path(__file__).resolve().parents[2]


def _request(*flags: str) -> GenerateRequest:
    return resolve(parser.build_parser().parse_args(["generate", "--prompt", "x", "--out", "x.mp4", *flags]))


def test_no_getattr_on_parsed_arguments():
    found = [f"{p.relative_to(ROOT)}:{i}" for folder in ("wan_core", "nodes") for p in (ROOT / folder).rglob("*.py")
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"getattr\(args\b", line)]
    assert found == []


def test_request_is_frozen_and_takes_the_variants_defaults():
    demo = _request()  # no model given: the demo model
    assert demo.preset == "demo"
    with pytest.raises(dataclasses.FrozenInstanceError):
        demo.steps = 3  # type: ignore[misc]
    row = variants.VARIANTS[variants.PRESET_VARIANTS["demo"]].sampling
    assert {k: getattr(demo, k) for k in row.generation()} == row.generation()
    tiny = _request("--preset", "tiny-random", "--steps", "2")
    row = variants.VARIANTS["tiny-random"].sampling
    assert (tiny.width, tiny.frames, tiny.steps, tiny.negative_prompt) == (row.width, row.frames, 2, None)
    wan21 = _request("--dit", "missing.safetensors")
    assert {k: getattr(wan21, k) for k in variants.WAN21.generation()} == variants.WAN21.generation()
    a14b = _request("--dit-high", "h", "--dit-low", "l", "--vae", "v")
    t2v = variants.T2V_A14B
    assert (a14b.steps, a14b.shift, a14b.guidance, a14b.guidance_low, a14b.boundary, a14b.dit_file) == (
        t2v.steps, t2v.shift, t2v.guidance, t2v.guidance_low, t2v.boundary, "h")


def test_parser_choices_equal_the_library_tuples():
    from wan_core.attention.dispatch import Attention
    from wan_core.attention.skiparse import SCHEDULES
    from wan_core.cache import PRESETS
    from wan_core.dit.options import WEIGHT_FORMATS
    from wan_core.memory.offload import DIT_OFFLOAD, TEXT_ENCODER_OFFLOAD, VAE_OFFLOAD
    from wan_core.quant.fp8 import GEMM_MODES
    from wan_core.quant.gguf_writer import WRITABLE_TYPES
    from wan_core.sampling import SOLVER_NAMES

    assert parser.SOLVERS == tuple(SOLVER_NAMES) and parser.CACHES == tuple(PRESETS)
    assert parser.ATTENTIONS == get_args(Attention) and parser.GEMMS == tuple(GEMM_MODES)
    assert parser.GGUF_WRITABLE_TYPES == WRITABLE_TYPES
    assert parser.SKIPARSE == tuple(s for s in SCHEDULES if s != "custom")
    assert parser.WEIGHTS == tuple(w for w in WEIGHT_FORMATS if w.startswith("fp8"))
    assert (parser.TEXT_ENCODER_OFFLOAD, parser.VAE_OFFLOAD, parser.DIT_OFFLOAD) == (
        tuple(TEXT_ENCODER_OFFLOAD), tuple(VAE_OFFLOAD), tuple(DIT_OFFLOAD))
