"""tests/child_cases.py: one program runs several cases, each with what a program of its own
would give it (its fds 1 and 2, warnings shown afresh, the console script's exit code)."""

from __future__ import annotations

from tests.child_cases import STARTUP, Case, run_cases, stderr_of

WARN = "import warnings\nwarnings.warn('careful', UserWarning)\n"


def test_each_case_gets_its_own_fds_warnings_and_exit_code() -> None:
    got = run_cases([
        Case("fd 2", code="import os, sys\nprint('out')\nos.write(2, b'from C\\n')\n"
                          "sys.exit(3)"),
        Case("warns", code=WARN),
        Case("warns again", code=WARN),
        Case("raises", code="raise ValueError('boom')"),
        Case("cli", argv=["--version"]),
        Case("usage", argv=["m.pt", "--frobnicate"]),
    ])
    assert got["fd 2"].code == 3 and got["fd 2"].out == "out\n"
    assert got["fd 2"].err == "from C\n"  # written below Python, still the case's
    for name in ("warns", "warns again"):  # shown again: the registry is the case's own
        assert got[name].code == 0 and "UserWarning: careful" in got[name].err, got[name]
    assert got["raises"].code == 1 and "ValueError: boom" in got["raises"].err
    assert got["cli"].code == 0 and got["cli"].out.startswith("export-gelu ")
    assert got["usage"].code == 2 and "unrecognized arguments" in got["usage"].err
    assert got[STARTUP].code == 0
    assert stderr_of(got, "usage") == got[STARTUP].err + got["usage"].err
