"""``python -m wan_core``: parse the flags, run the command, and turn any error into one line on stderr with its
exit code (``--debug``: the traceback instead)."""
from __future__ import annotations

import sys

from .errors import EXIT_USAGE, describe_error
from .parser import build_parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        return run(args)
    except BaseException as e:  # every error becomes one line; --debug shows the traceback
        if isinstance(e, SystemExit):  # --help
            raise
        if args is not None and args.debug:
            raise
        line, code = describe_error(e)
        print(line, file=sys.stderr)
        return code


def run(args) -> int:
    """The parsed command: ``generate`` (the request built, then run), ``train-demo``, ``quantize`` or ``vae``."""
    if args.command == "quantize":
        from .quantize import quantize

        return quantize(args)
    if args.command == "train-demo":
        from ..demo.train import main as train_demo

        return train_demo(args)
    if args.command == "vae":
        from .vae import run as run_vae

        return run_vae(args)
    from .generate import generate
    from .request import build_request

    return generate(build_request(args))
