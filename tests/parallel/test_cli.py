"""``wan_core generate --ulysses/--ring/--cfg-parallel``: usage errors at once, and a torchrun run (slow suite)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wan_core.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_degrees_without_torchrun_are_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code = main(["generate", "--preset", "tiny-random", "--prompt", "a fox", "--ulysses", "2",
                 "--out", str(tmp_path / "a.mp4")])
    err = capsys.readouterr().err
    assert code != 0 and "torchrun --nproc-per-node 2" in err and not (tmp_path / "a.mp4").exists()


def test_degrees_must_match_torchrun_processes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    code = main(["generate", "--preset", "tiny-random", "--prompt", "a", "--ulysses", "2", "--cfg-parallel",
                 "--ring", "2", "--out", str(tmp_path / "a.mp4")])
    err = capsys.readouterr().err
    assert code != 0 and "8 processes but 4 torchrun processes" in err
    assert "ulysses=1 ring=2, ulysses=2 ring=1" in err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists(),
                    reason="torchrun not installed")
def test_torchrun_two_ranks_only_rank0_writes(tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    out = tmp_path / "video.mp4"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [torchrun, "--nproc-per-node", "2", "-m", "wan_core", "generate", "--preset", "tiny-random",
           "--ring", "2", "--device", "cpu", "--prompt", "a fox", "--out", str(out)]
    run = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert out.exists() and run.stderr.count("wrote ") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["video.mp4"]
