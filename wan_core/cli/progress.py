"""Progress bars on stderr for the command line (tqdm, imported when a bar is drawn)."""
from __future__ import annotations


def tqdm_progress(desc: str, unit: str = "tensor", leave: bool = False):
    """A ``(done, total)`` callback drawing a tqdm bar, created with its total on the first call (so it shows
    from the start) and closed when done == total; a restart with another total (tiled decode after an
    out-of-memory error) resets it."""
    from tqdm.auto import tqdm

    bar = None

    def callback(done: int, total: int) -> None:
        nonlocal bar
        if bar is None or bar.total != total:
            if bar is not None:
                bar.close()
            bar = tqdm(total=total, desc=desc, unit=unit, leave=leave)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return callback
