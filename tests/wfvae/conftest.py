"""tests/wfvae run their tiny models on one intra-op thread: the tensors hold a few hundred values, and on the
shared 2-core CI machine a second OpenMP thread only adds synchronisation (measured: 1.5 s of CPU for the folder
on one thread vs 21 s on two under load)."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
