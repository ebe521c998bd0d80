"""The CLI's memory flags (docs/memory.md): --blocks-to-swap / --prefetch checked before loading with one-line
errors (or a one-line note where swapping is a no-op), and the per-stage peak memory lines of a run."""
from __future__ import annotations

import pytest
import torch

from wan_core.cli import main, models as cli_models
from wan_core.cli.errors import UsageError
from wan_core.cli.parser import build_parser
from wan_core.cli.placement import check_memory
from wan_core.cli.request import resolve


class Loaded(Exception):
    """Raised by the tripwire: validation let the command reach model loading."""


def run(capsys, monkeypatch, *args: str, tripwire: bool = True) -> tuple[object, list[str]]:
    if tripwire:
        monkeypatch.setattr(cli_models, "load_models", lambda *a, **k: (_ for _ in ()).throw(Loaded()))
    try:
        code: object = main(["generate", "--prompt", "a fox", "--width", "32", "--height", "32", "--frames", "5",
                                 *args])
    except Loaded:
        code = "loaded"
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize("flags, message", [
    (["--prefetch", "-1"], "--prefetch -1: must be an integer >= 0"),
    (["--blocks-to-swap", "-3"], "--blocks-to-swap -3: must be an integer >= 0"),
    (["--preset", "demo", "--blocks-to-swap", "7"], "blocks_to_swap=7 exceeds the model's 6 blocks"),
])
def test_bad_swap_options_one_line_before_loading(capsys, monkeypatch, tmp_path, flags, message):
    code, lines = run(capsys, monkeypatch, "--out", str(tmp_path / "x.webp"), *flags)
    errors = [line for line in lines if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1 and message in errors[0], lines


@pytest.mark.skipif(torch.cuda.is_available(), reason="the note is for CPU-only runs")
def test_swap_on_cpu_is_a_one_line_note(capsys, monkeypatch, tmp_path):
    code, lines = run(capsys, monkeypatch, "--out", str(tmp_path / "x.webp"), "--preset", "demo", "--device", "cpu",
                      "--blocks-to-swap", "2", "--debug")
    assert code == "loaded", lines
    notes = [line for line in lines if "no-op" in line]
    assert len(notes) == 1 and notes[0].startswith("wan_core: note: blocks_to_swap=2"), lines


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_swap_on_absent_cuda_refused(capsys, monkeypatch, tmp_path):
    code, lines = run(capsys, monkeypatch, "--out", str(tmp_path / "x.webp"), "--preset", "demo", "--device", "cuda",
                      "--blocks-to-swap", "2")
    assert code == 2 and len(lines) == 1 and "CUDA is not available" in lines[0], lines


def test_run_prints_peak_memory_per_stage(capsys, monkeypatch, tmp_path):
    code, lines = run(capsys, monkeypatch, "--out", str(tmp_path / "x.webp"), "--preset", "tiny-random",
                      "--steps", "1", "--text-encoder-offload", "release", tripwire=False)
    assert code == 0, lines
    memory = [line for line in lines if line.startswith("wan_core: memory, ")]
    assert [m.split(", ")[1].split(":")[0] for m in memory] == ["text encoding", "sampling", "decoding"], memory
    assert all("peak" in m and "weights" in m for m in memory)
    print("\n".join(memory))


def test_swapped_blocks_do_not_count_against_the_gpu(monkeypatch):
    """The 14B fp8 DiT on a 12 GiB card: refused up front without swap, accepted with 30 of 40 blocks swapped."""
    from wan_core import estimate

    monkeypatch.setattr(estimate, "total_memory", lambda device=None: 12 * 2**30 if device is not None and
                        getattr(device, "type", device) == "cuda" else 64 * 2**30)
    request = resolve(build_parser().parse_args(["generate", "--prompt", "x", "--out", "x.mp4", "--width", "832",
                                                 "--height", "480", "--frames", "81", "--weights", "fp8_scaled"]))
    assert (request.blocks_to_swap, request.prefetch) == (0, 1)
    with pytest.raises(UsageError, match="14B DiT needs at least"):
        check_memory(request, torch.device("cuda"), "14B", 40, swapped=request.blocks_to_swap)
    request = request.replace(blocks_to_swap=30)  # placement.swap_blocks: all 30 swapped on a GPU
    check_memory(request, torch.device("cuda"), "14B", 40, swapped=request.blocks_to_swap)
