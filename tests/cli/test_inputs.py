"""``python -m wan_core generate`` checks every flag before a model is loaded, and every error becomes one line
on stderr with exit code 2 (130 when interrupted); ``--debug`` shows the traceback instead.

In-process (``main(argv)``) so each case costs milliseconds; ``load_models`` is replaced by a tripwire, so a
case that passes validation by mistake fails loudly instead of generating."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from wan_core.cli import main, models as cli_models
from wan_core.cli.errors import UsageError
from wan_core.cli.parser import build_parser
from wan_core.cli.placement import check_memory
from wan_core.cli.request import resolve


class Loaded(Exception):
    """Raised by the tripwire: validation let the command reach model loading."""


@pytest.fixture
def tripwire(monkeypatch):
    def load_models(*a, **k):
        raise Loaded()

    monkeypatch.setattr(cli_models, "load_models", load_models)


def run(capsys, *args: str, preset: bool = True) -> tuple[int, list[str]]:
    argv = ["generate", *(["--preset", "tiny-random"] if preset else []), *args]
    code = main(argv)
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.strip()]


def one_error(capsys, *args: str, preset: bool = True) -> str:
    code, lines = run(capsys, *args, preset=preset)
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize("flags, message", [
    (["--guidance", "inf"], "guidance=inf: must be a finite number"),
    (["--guidance", "nan"], "guidance=nan: must be a finite number"),
    (["--shift=-inf"], "shift=-inf: must be a finite number"),
    (["--seed", "-1"], "seed=-1: must be an integer from 0 to 18446744073709551615"),
    (["--seed", str(2**64)], "seed=18446744073709551616: must be an integer from 0 to 18446744073709551615"),
    (["--fps", "0"], "fps=0: must be an integer from 1 to 120"),
    (["--fps", "-5"], "fps=-5: must be an integer from 1 to 120"),
    (["--steps", "0"], "steps=0"),
    (["--frames", "4001"], "frames=4001: must be an integer from 1 to 2001"),
    (["--width", "8208"], "width=8208: must be an integer from 16 to 8192"),
    (["--width", "100000", "--height", "100000"], "width=100000"),
    (["--frames", "10001"], "frames=10001"),
    (["--skiparse-k", "0"], "skiparse_k=0"),
])
def test_bad_numbers_are_refused_before_loading(capsys, tripwire, tmp_path, flags, message):
    assert message in one_error(capsys, "--prompt", "a fox", "--out", str(tmp_path / "x.webp"), *flags)


def test_largest_seed_is_accepted(capsys, tripwire, tmp_path):
    with pytest.raises(Loaded):
        main(["generate", "--preset", "tiny-random", "--prompt", "a fox", "--out", str(tmp_path / "x.webp"),
                  "--seed", str(2**64 - 1), "--debug"])


@pytest.mark.parametrize("prompt, negative, message", [
    ("", None, "--prompt: the prompt is empty"),
    ("   ", None, "--prompt: the prompt is empty"),
    ("a fox \udcff", None, "--prompt: contains invalid Unicode (a lone surrogate U+DCFF"),  # argv surrogateescape
    ("a fox", "blurry \ud800", "--negative-prompt: contains invalid Unicode"),
])
def test_bad_prompts_are_refused_before_loading(capsys, tripwire, tmp_path, prompt, negative, message):
    neg = ["--negative-prompt", negative] if negative is not None else []
    assert message in one_error(capsys, "--prompt", prompt, *neg, "--out", str(tmp_path / "x.webp"))


def test_empty_negative_prompt_is_allowed(capsys, tripwire, tmp_path):
    with pytest.raises(Loaded):
        main(["generate", "--preset", "tiny-random", "--prompt", "a fox", "--negative-prompt", "",
                  "--out", str(tmp_path / "x.webp"), "--debug"])


def test_out_paths_are_checked_before_generating(capsys, tripwire, tmp_path):
    assert "--out '': the output path is empty" in one_error(capsys, "--prompt", "x", "--out", "")
    assert "the output path is empty" in one_error(capsys, "--prompt", "x", "--out", "  ")
    mine = tmp_path / "holiday"
    mine.mkdir()
    (mine / "photo.jpg").write_bytes(b"not ours")
    msg = one_error(capsys, "--prompt", "x", "--out", str(mine))
    assert "holds other files (photo.jpg)" in msg and "nothing is overwritten" in msg
    assert (mine / "photo.jpg").read_bytes() == b"not ours"
    msg = one_error(capsys, "--prompt", "x", "--out", str(tmp_path / "missing" / "x.mp4"))
    assert "output folder does not exist" in msg
    assert not (tmp_path / "missing").exists()
    (tmp_path / "a.mp4").mkdir()
    assert "is an existing folder" in one_error(capsys, "--prompt", "x", "--out", str(tmp_path / "a.mp4"))
    (tmp_path / "file").write_text("x")
    assert "exists and is a file" in one_error(capsys, "--prompt", "x", "--out", str(tmp_path / "file"))
    assert "give a folder name" in one_error(capsys, "--prompt", "x", "--out", str(tmp_path / "x.png"))
    assert "unknown output extension '.avi'" in one_error(capsys, "--prompt", "x", "--out", str(tmp_path / "x.avi"))


def test_unwritable_out_folder_is_refused_before_generating(capsys, tripwire, tmp_path):
    if os.geteuid() == 0:  # root ignores permission bits: use a folder no one can create files in
        target = "/proc/wancore_test.mp4"
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        target = str(locked / "x.mp4")
    assert "cannot write into this folder" in one_error(capsys, "--prompt", "x", "--out", target)


def test_empty_or_earlier_frames_folder_is_accepted(capsys, tripwire, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "frame_00000.png").write_bytes(b"")
    for out in (empty, earlier):
        with pytest.raises(Loaded):
            main(["generate", "--preset", "tiny-random", "--prompt", "x", "--out", str(out), "--debug"])


def test_missing_model_paths_are_one_line(capsys, tmp_path):
    msg = one_error(capsys, "--prompt", "x", "--out", str(tmp_path / "x.mp4"), "--dit",
                    str(tmp_path / "nope.safetensors"), "--vae", "v", "--text-encoder", "t", preset=False)
    assert "--dit" in msg and "no such file or folder" in msg


def test_sizes_that_cannot_fit_are_refused_before_loading(capsys, tripwire, tmp_path):
    """Inside the ranges, but 8192x8192x2001 decoded frames (1.6 TB in float32) fit no machine."""
    t0 = time.perf_counter()
    msg = one_error(capsys, "--prompt", "x", "--out", str(tmp_path / "x.webp"), "--width", "8192", "--height",
                    "8192", "--frames", "2001")
    assert time.perf_counter() - t0 < 1.0
    assert "8192x8192, 2001 frames:" in msg and "alone need" in msg


def test_check_memory_uses_the_dit_size_and_the_device(monkeypatch):
    import torch

    from wan_core import estimate

    request = resolve(build_parser().parse_args(["generate", "--prompt", "x", "--out", "x.mp4", "--width", "832",
                                                 "--height", "480", "--frames", "81"]))
    monkeypatch.setattr(estimate, "total_memory", lambda device=None: 2 << 30)  # a 2 GiB machine
    with pytest.raises(UsageError, match="the 1.3B DiT needs at least"):
        check_memory(request, torch.device("cpu"), "1.3B")
    check_memory(request, torch.device("cpu"), None)  # a test-size model: only latent and frames, which fit


# ---------------------------------------------------------------- errors from deeper down

@pytest.mark.parametrize("make, code, expected", [
    (lambda: __import__("wan_core").CheckpointError("x.safetensors: not a Wan 2.1 DiT"), 2, "error: x.safetensors"),
    (lambda: __import__("wan_core.text.tokenizer", fromlist=["TokenizerError"]).TokenizerError("no spiece"), 2,
     "error: no spiece"),
    (lambda: ValueError("frames=80: bad\nsecond line"), 2, "error: frames=80: bad"),
    (lambda: __import__("torch").OutOfMemoryError("CUDA out of memory. Tried to allocate 20 GiB"), 2,
     "error: out of memory (CUDA out of memory"),
    (lambda: RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 TB"), 2,
     "error: out of memory"),
    (lambda: KeyboardInterrupt(), 130, "interrupted"),
    (lambda: __import__("wan_core.sampling", fromlist=["x"]).SamplingInterrupted(3, 10), 130, "interrupted"),
    (lambda: FileNotFoundError(2, "No such file or directory", "tok/spiece.model"), 2, "error: [Errno 2]"),
    (lambda: TypeError("a bug"), 1, "error: internal error TypeError: a bug (run with --debug"),
])
def test_errors_become_one_line_and_an_exit_code(capsys, monkeypatch, tmp_path, make, code, expected):
    def load_models(*a, **k):
        raise make()

    monkeypatch.setattr(cli_models, "load_models", load_models)
    got, lines = run(capsys, "--prompt", "x", "--out", str(tmp_path / "x.webp"))
    assert got == code and len(lines) == 1 and lines[0].startswith(expected), lines
    assert not any("Traceback" in line for line in lines)


def test_debug_shows_the_traceback(capsys, monkeypatch, tmp_path):
    def load_models(*a, **k):
        raise ValueError("deep down")

    monkeypatch.setattr(cli_models, "load_models", load_models)
    for argv in (["--debug", "generate"], ["generate", "--debug"]):
        with pytest.raises(ValueError, match="deep down"):
            main([*argv, "--preset", "tiny-random", "--prompt", "x", "--out", str(tmp_path / "x.webp")])


def test_undecodable_argv_bytes_end_to_end(tmp_path):
    """The real path: bytes that are not UTF-8 on the command line (Python decodes argv with surrogateescape)."""
    res = subprocess.run([sys.executable, "-m", "wan_core", "generate", "--preset", "tiny-random", "--prompt",
                          b"a fox \xff", "--out", str(tmp_path / "x.webp")], capture_output=True, timeout=120, check=False,
                         env={**os.environ, "LC_ALL": "C.UTF-8", "PYTHONUTF8": "1"})
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 2 and "contains invalid Unicode (a lone surrogate U+DCFF" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x.webp").exists()


@pytest.mark.parametrize("guidance", [float("inf"), float("nan"), -1.0])
def test_generation_config_refuses_non_finite_guidance(guidance):
    """The same rule for Python API callers (GenerationConfig.validate), not only the command line."""
    from wan_core.pipeline import GenerationConfig

    with pytest.raises(ValueError, match="guidance=.*must be a finite number >= 0"):
        GenerationConfig(prompt="x", guidance=guidance).validate()


@pytest.mark.parametrize("device, message", [("mps", "MPS (Apple GPU) is not available"),
                                             ("gpu", "--device 'gpu'"), ("xla", "use auto, cpu, cuda")])
def test_unusable_devices_are_refused_before_loading(capsys, tripwire, tmp_path, device, message):
    import torch

    if device == "mps" and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    assert message in one_error(capsys, "--prompt", "x", "--out", str(tmp_path / "x.webp"), "--device", device)
