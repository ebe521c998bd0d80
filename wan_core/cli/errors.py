"""What the command line does with an error: a bad flag or value is one line on stderr and exit code 2, an
interruption 130, anything else one line naming the internal error (``--debug`` shows the traceback)."""
from __future__ import annotations

EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 2, 1, 130


class UsageError(Exception):
    """A bad flag or value: printed as one line, exit code 2."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _is_interrupt(e: BaseException) -> bool:
    # KeyboardInterrupt, or the project's one interrupt exception (sampling, VAE, text encoding raise it)
    from ..progress import Interrupted

    return isinstance(e, (KeyboardInterrupt, Interrupted))


def _is_out_of_memory(e: BaseException) -> bool:
    text = str(e).lower()
    return (isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError"
            or (isinstance(e, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)))


def _is_load_out_of_memory(e: BaseException) -> bool:
    from ..checkpoint import LoadMemoryError

    return isinstance(e, LoadMemoryError)


def describe_error(e: BaseException) -> tuple[str, int]:
    """(one line for stderr, exit code) for an exception that escaped a command."""
    if isinstance(e, UsageError):
        return f"error: {e}", EXIT_USAGE
    if _is_interrupt(e):
        return "interrupted", EXIT_INTERRUPTED
    if _is_load_out_of_memory(e):  # already says the sizes and what to do
        return f"error: {_first_line(e)}", EXIT_USAGE
    if _is_out_of_memory(e):
        return (f"error: out of memory ({_first_line(e)[:200]}); try a smaller size or fewer frames, "
                f"--weights fp8_scaled, --tiling on, or another --device"), EXIT_USAGE
    if isinstance(e, (ValueError, OSError)):  # CheckpointError, TokenizerError, NonFiniteError are ValueErrors
        return f"error: {_first_line(e)}", EXIT_USAGE
    if isinstance(e, ImportError):
        return f"error: {_first_line(e)} (a missing optional package; see README: install)", EXIT_USAGE
    return (f"error: internal error {type(e).__name__}: {_first_line(e)} (run with --debug for the traceback and "
            f"please report it)"), EXIT_INTERNAL

