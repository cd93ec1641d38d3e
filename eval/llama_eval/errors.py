"""Exceptions that end a command with a one-line message instead of a
traceback, and the one-line warnings that let it go on."""

import sys


class UsageError(Exception):
    """Wrong input from the user (flags, files, URLs): exit code 2."""


class RunError(Exception):
    """The run could not finish (e.g. every server failed): exit code 1."""


def warn(message: str) -> None:
    print(f"llama-eval: warning: {message}", file=sys.stderr, flush=True)
