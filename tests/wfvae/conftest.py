"""tests/wfvae run their tiny models on one intra-op thread: the tensors hold a few hundred values, and on the
shared 2-core CI machine a second OpenMP thread only adds synchronisation (measured: 1.5 s of CPU for the folder
on one thread vs 21 s on two under load). Slow tests run only when ``-m`` asks for them."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pytest_collection_modifyitems(config, items):
    """This folder's ``@pytest.mark.slow`` tests (the 1x/2x/4x memory table) are skipped unless ``-m`` names
    ``slow``: a plain ``pytest tests/wfvae`` stays quick (CI deselects them with ``-m "not slow"`` anyway)."""
    if "slow" in (config.getoption("-m") or ""):
        return
    here = Path(__file__).parent
    for item in items:
        if "slow" in item.keywords and here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.skip(reason="slow test: run with -m slow"))
