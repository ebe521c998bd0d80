"""tests/train: tiny models run fastest (and steadiest on a shared 2-core machine) on one thread."""
import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
