"""``python -m wan_core quantize IN OUT.gguf --type Q8_0``: a Wan DiT written as a GGUF file (docs/gguf.md).

Every check (input exists, output new and ``.gguf``, gguf installed) runs before a tensor is read; a tqdm bar
shows the tensors written; Ctrl-C leaves no partial file (``write_gguf`` removes it)."""
from __future__ import annotations

import sys
from pathlib import Path

from .errors import UsageError
from .progress import tqdm_progress


def quantize(args) -> int:
    from ..quant.gguf_writer import write_gguf

    src, out = Path(args.input), Path(args.output)
    if not src.exists():
        raise UsageError(f"{src}: no such file or folder")
    if out.exists():
        raise UsageError(f"{out}: already exists; give a new file name (it is never overwritten)")
    if out.suffix.lower() != ".gguf":
        raise UsageError(f"{out}: the output must be a .gguf file")
    try:
        import gguf  # noqa: F401  (checked before any tensor is read)
    except ImportError:
        raise UsageError("quantize needs the gguf package: pip install gguf (or pip install "
                         "comfyui-wancore[gguf])") from None
    counts = write_gguf(src, out, args.type, progress=tqdm_progress(f"quantize {args.type}"))
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB; tensors: {summary})", file=sys.stderr)
    return 0
