"""Shared fixtures of the command-line tests."""
from __future__ import annotations

import pytest

from wan_core.cli import models as cli_models


class Loaded(Exception):
    """Raised by the tripwire: validation let the command reach model loading."""


@pytest.fixture
def tripwire(monkeypatch):
    """Model loading raises ``Loaded``: a test that expects a refusal before loading fails loudly otherwise."""
    def load_models(*a, **k):
        raise Loaded()

    monkeypatch.setattr(cli_models, "load_models", load_models)
