"""Errors the CLI turns into exit codes (README "Exit codes": 1 parity, 2 bad input, 3 target)."""

from __future__ import annotations


class ExportGeluError(Exception):
    """Base class: a message meant for the user, and the exit code it maps to."""

    exit_code = 2


class BadInputError(ExportGeluError):
    """The model file, an input spec or a flag is unusable (exit 2)."""

    exit_code = 2


class TargetUnmetError(ExportGeluError):
    """The target cannot be met: an op, opset or feature it lacks (exit 3)."""

    exit_code = 3
