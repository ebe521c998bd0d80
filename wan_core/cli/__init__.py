"""The command line: ``python -m wan_core generate --prompt "..." --out video.mp4`` and ``train-demo``."""
from .app import main

__all__ = ["main"]
