"""Command line: ``python -m workbench {info, tasks, train, eval, compare, generate, ...} --help``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch

from .._version import __version__
from . import analyses, reading, training
from .training import add_arguments, config_from_args

__all__ = ["add_arguments", "build_parser", "config_from_args", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workbench", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for family in (training, reading, analyses):
        family.add_parsers(sub)
    return parser


def _one_line(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        where = f" {e.filename}" if e.filename is not None else ""
        return f"{e.strerror}:{where}" + (f" -> {e.filename2}" if e.filename2 is not None else "")
    return " ".join(str(e).splitlines()) or type(e).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a user's error exits 2 in one line (no traceback), Ctrl-C 130."""
    args = build_parser().parse_args(argv)
    if getattr(args, "threads", None) is not None:  # every command that computes takes --threads
        torch.set_num_threads(args.threads)
    try:
        return args.func(args)
    except (ValueError, OverflowError, OSError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
