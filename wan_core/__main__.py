"""``python -m wan_core``: the command line (``wan_core.cli``)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
