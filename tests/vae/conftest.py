"""Shared fixtures for the VAE tests: a diffusers AutoencoderKLWan reference with every tensor randomised,
and our VAE loaded from the same weights under official names (the parity references of docs/wan_spec.md section 7)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from vae_testlib import make_reference, official_state_dict  # noqa: E402


@pytest.fixture(scope="session")
def reference():
    return make_reference(seed=0)


@pytest.fixture(scope="session")
def official_sd(reference):
    return official_state_dict(reference)


@pytest.fixture(scope="session")
def vae(official_sd):
    from wan_core.vae import load_vae

    return load_vae(official_sd)




def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.slow`` tests of this folder run only when asked for (``-m slow``), so that a plain
    ``pytest tests/vae`` stays quick; CI's ``-m "not slow"`` deselects them anyway."""
    if "slow" in (config.getoption("-m") or ""):
        return
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason="slow test: run with -m slow")
    for item in items:
        if "slow" in item.keywords and here in Path(str(item.fspath)).parents:
            item.add_marker(skip)
