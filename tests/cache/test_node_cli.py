"""The ComfyUI node (WanCoreCache -> WanCoreSampler's optional cache input), the sampler's report, and the CLI's
``--cache`` line, called without ComfyUI."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

from wan_core.cache import PRESETS, CacheConfig
from wan_core.demo import tiny_random_models

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^cache (\w+): (\d+)/(\d+) DiT evaluations$", re.M)


@pytest.fixture(scope="module")
def nodes():
    name = "wancore_workflows_build"  # the name tests/nodes gives it (one instance)
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "workflows" / "build.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    pack = sys.modules[name].load_pack()  # the pack imported as ComfyUI does
    from importlib import import_module

    return {n: import_module(f"{pack.__name__}.nodes.{n}") for n in ("cache", "sampler", "conditioning", "latent",
                                                                      "host")}


@pytest.fixture(scope="module")
def tiny():
    return tiny_random_models(seed=0)


def test_node_builds_the_config_and_checks_it_before_queueing(nodes):
    node = nodes["cache"]
    (cfg,) = node.make_cache("wan")
    assert cfg == CacheConfig.preset("wan")
    (cfg,) = node.make_cache("teacache", threshold=0.1, start=0.1, end=0.9, teacache_mode="e0")
    assert (cfg.threshold, cfg.start, cfg.end, cfg.teacache_mode) == (0.1, 0.1, 0.9, "e0")
    assert node.validate_cache("magcache", threshold=0.24) is True
    assert "start=0.7 is not before end=0.3" in node.validate_cache("wan", start=0.7, end=0.3)
    assert "threshold=-0.5" in node.validate_cache("teacache", threshold=-0.5)
    assert "unknown method 'x'" in node.validate_cache("x")
    assert "expected 2 x steps" in node.validate_cache("magcache", calibration="[1, 1, 1]")
    assert node.CACHE.signature_mismatches() == []


def test_sampler_with_and_without_the_cache_input(nodes, tiny, monkeypatch):
    dit, _vae, te = tiny
    shown = []
    monkeypatch.setattr(nodes["host"], "show_text", shown.append)
    (embeds,) = nodes["conditioning"].text_encode(te, "a fox", "")
    (lat,) = nodes["latent"].empty_latent(64, 64, 5, 1)
    (plain,) = nodes["sampler"].sample(dit, embeds, lat, seed=1, steps=10, guidance=5.0)
    (cache,) = nodes["cache"].make_cache("wan")
    (cached,) = nodes["sampler"].sample(dit, embeds, lat, seed=1, steps=10, guidance=5.0, cache=cache)
    assert [LINE.search(t).groups() for t in shown] == [("exact", "20", "20"), ("wan", "16", "20")]
    assert "uncond 6/10 computed (4 estimated)" in shown[1]
    assert plain["samples"].shape == cached["samples"].shape
    assert not torch.equal(plain["samples"], cached["samples"])
    # the optional input is declared, so graphs without it keep working
    decl = {i.name: i for i in nodes["sampler"].SAMPLER.inputs}
    assert decl["cache"].optional and decl["cache"].type == "WANCORE_CACHE"


def test_cli_prints_the_cache_line(tmp_path, capsys):
    from wan_core.cli import main
    from wan_core.cli.parser import CACHES

    assert CACHES == PRESETS
    code = main(["generate", "--preset", "tiny-random", "--prompt", "a fox", "--out", str(tmp_path / "frames"),
                 "--frames", "5", "--width", "32", "--height", "32", "--steps", "4", "--cache", "wan"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert LINE.findall(err) == [("wan", "7", "8")]  # 4 steps: window from step 1, uncond estimated at step 2
