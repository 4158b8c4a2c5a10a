"""Command line: argument parsing only; everything else is in export_gelu.api. The parsers are
built from the flag table (export_gelu/flag_table/table.py: one declaration per flag).

Start-up is light: this module imports argparse, the targets' names and the error mapping;
torch, onnx and onnxruntime are imported when a command runs, after its flags are parsed, so
`--help` and `--version` answer at once. Signals are handled from the first line of `main`
(export_gelu/interrupts.py): a Ctrl-C or SIGTERM at any moment ends the run with one line and
exit 130 or 143.
"""

from __future__ import annotations

import os
import sys

from export_gelu.interrupts import install_startup_handlers

if __name__ == "__main__" or os.path.basename(sys.argv[0]) == "export-gelu":
    install_startup_handlers(program=True)  # one line for a signal from here on

import argparse  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

from export_gelu import flag_table  # noqa: E402
from export_gelu.errors import failure_outcome  # noqa: E402
from export_gelu.interrupts import handled_signals, work_begins  # noqa: E402
from export_gelu.options import (  # noqa: E402
    ExportOptions,
    VerifyOptions,
    check_compare_forms_flags,
)

if TYPE_CHECKING:
    from export_gelu.report.report import Report


def export_parser() -> argparse.ArgumentParser:
    """`export-gelu MODEL ...` (and `--compare-forms`): built from the flag table."""
    return flag_table.parser("export")


def verify_parser() -> argparse.ArgumentParser:
    """`export-gelu verify MODEL DEPLOYED ...`: built from the flag table."""
    return flag_table.parser("verify")


def inspect_parser() -> argparse.ArgumentParser:
    """`export-gelu inspect MODEL.onnx ...`: built from the flag table."""
    return flag_table.parser("inspect")


def verify_options(args: argparse.Namespace) -> VerifyOptions:
    """`export-gelu verify` flags → the options verify() takes (checked there)."""
    return flag_table.verify_options(vars(args))


def export_options(args: argparse.Namespace) -> ExportOptions:
    """Export flags → the options export() takes (checked there, by options.validate)."""
    return flag_table.export_options({**vars(args), "target": args.target or "trt"})


def _run_verify(argv: Sequence[str]) -> int:
    parser = verify_parser()
    args = parser.parse_args(argv)
    from export_gelu import api
    from export_gelu.progress import Progress

    work_begins()
    rep = api.verify(args.model, args.deployed, options=verify_options(args),
                     progress=Progress(quiet=args.quiet))
    print(rep.summary())
    return rep.exit_code


def _run_forms(args: argparse.Namespace) -> int:
    """`--compare-forms` and `--gelu auto`: measure the GELU forms."""
    from export_gelu import api
    from export_gelu.progress import Progress

    if args.compare_forms:
        options = flag_table.forms_options(vars(args))
        rep = api.forms_report(args.model, options, progress=Progress(quiet=args.quiet))
        print(rep.summary())
        return 0
    rep = api.export_with_best_form(args.model, export_options(args),
                                    Progress(quiet=args.quiet))
    return _finish_export(rep)


def _finish_export(rep: Report) -> int:
    """Print the summary (the API has written --report-md); the report's exit code."""
    print(rep.summary())
    return rep.exit_code


def _run_export(argv: Sequence[str]) -> int:
    parser = export_parser()
    parser.set_defaults(target=None)  # tells an explicit --target from the default (trt)
    args = parser.parse_args(argv)
    from export_gelu import api
    from export_gelu.progress import Progress

    work_begins()
    if args.compare_forms:  # flags the comparison's record has no field for
        check_compare_forms_flags(output=args.output, gelu=args.gelu, cast_down=args.cast_down)
    if args.compare_forms or args.gelu == "auto":
        return _run_forms(args)
    rep = api.export(args.model, options=export_options(args),
                     progress=Progress(quiet=args.quiet))
    return _finish_export(rep)


def _run_inspect(argv: Sequence[str]) -> int:
    import json

    args = inspect_parser().parse_args(argv)
    from export_gelu import api
    from export_gelu.check.inspection import format_table
    from export_gelu.progress import Progress
    from export_gelu.targets import resolve_target

    work_begins()
    targets = [resolve_target(t)[0].name for t in args.targets]
    progress = Progress(quiet=args.quiet)
    try:
        info = api.inspect_model(args.model, targets or None, dry_run=args.dry_run,
                                 nodes=args.nodes, progress=progress)
    finally:
        progress.done()
    print(json.dumps(info, indent=2) if args.json else format_table(info))
    rejected = [t for t in targets if info["compatibility"][t]]
    if rejected:
        print(f"export-gelu: {', '.join(rejected)} would not parse {args.model} as is",
              file=sys.stderr)
        return 3
    return 0


COMMANDS = {"inspect": _run_inspect, "verify": _run_verify}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every way it can end is mapped to an exit code by
    errors.failure_outcome (one line on stderr; the traceback too with --debug)."""
    with handled_signals():
        argv = list(sys.argv[1:] if argv is None else argv)
        debug = "--debug" in argv
        command = COMMANDS.get(argv[0]) if argv else None
        try:
            if command is not None:
                return command(argv[1:])
            return _run_export(argv)
        except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
            return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
        except BaseException as exc:  # noqa: BLE001 - the last line of defence: one line
            outcome = failure_outcome(exc)
            if debug and outcome.traceback:
                import traceback

                traceback.print_exc()
            print(outcome.line, file=sys.stderr)
            if isinstance(exc, KeyboardInterrupt):
                import gc

                gc.freeze()  # a signal asks to stop now: no full collection of the heap at exit
            return outcome.code


if __name__ == "__main__":
    sys.exit(main())
