"""Exceptions that end a command with a one-line message instead of a traceback."""


class UsageError(Exception):
    """Wrong input from the user (flags, files, URLs): exit code 2."""


class RunError(Exception):
    """The run could not finish (e.g. every server failed): exit code 1."""
