"""Command line: argument parsing only; everything else is in export_gelu.api.

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
import dataclasses  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any, NoReturn, TypeVar  # noqa: E402

from export_gelu import __version__  # noqa: E402
from export_gelu.errors import ExportGeluError, failure_outcome  # noqa: E402
from export_gelu.interrupts import handled_signals, work_begins  # noqa: E402
from export_gelu.options import (  # noqa: E402
    COMPARE_TARGETS,
    DEVICE_CHOICES,
    GELU_FORMS,
    ExportOptions,
    FormsOptions,
    RunOptions,
    VerifyOptions,
    check_compare_forms_flags,
)
from export_gelu.targets import TARGET_NAMES  # noqa: E402

T = TypeVar("T", bound=RunOptions)

EXPORT_EXAMPLES = """\
examples:
  export-gelu model.pt --target trt                      # newest TensorRT (or the installed one)
  export-gelu model.pt --target trt8.2 -o bert.onnx      # a fleet pinned to TensorRT 8.2
  export-gelu model.pt --target onnx --report r.json     # opset-20 ONNX with native Gelu
  export-gelu model.pt --input input_ids:1x128:int64:0,30522 --target ort
  export-gelu weights.pt --model-factory mypkg.models:build --input x:1x3x224x224
  export-gelu model.onnx --target trt8.6                 # rewrite an existing ONNX file
  export-gelu ./my-bert --target trt8.6                  # a save_pretrained folder
  export-gelu ./my-t5 --task text2text-generation-with-past -o t5-onnx/   # its 3 graphs
  export-gelu bert.pkl --allow-pickle --target trt8.2 --input input_ids:batchxseq:int64:0,30522 \
      --dynamic batch=1:8:32 --dynamic seq=1:128:512     # one export for every batch and length
  export-gelu model.onnx --dynamic batch=input_ids:0,attention_mask:0=1:8:32   # axes by index
  export-gelu model.pt --target trt8.2 --bundle jetson/   # build and check it on a Jetson
  export-gelu model.pt --target trt8.6 --gelu auto --bundle forms/   # the device times every form
  export-gelu inspect model.onnx                         # which TensorRT versions take it
  export-gelu verify model.pt deployed.onnx --inputs real_batch.npz
  export-gelu model.pt --compare-forms                   # GELU forms: error vs PyTorch, latency
  export-gelu model.pt --target onnx --gelu auto --atol 1e-3   # fastest form within 1e-3

exit codes: 0 done, 1 parity failed, 2 bad input or usage, or the system refused (disk
            full, file-size limit, no permission, name too long: the line says which and
            where), 3 target cannot be met, 4 internal error (a bug: please report it with
            --debug output), 130 Ctrl-C, 143 SIGTERM
"""


#: The usage line of `export-gelu --help`: the export below, and the two other commands.
EXPORT_USAGE = """export-gelu MODEL [--target TARGET] [-o OUT.onnx] [options]   (below)
       export-gelu verify MODEL DEPLOYED [options]   (export-gelu verify --help)
       export-gelu inspect MODEL.onnx [options]      (export-gelu inspect --help)"""


def target_name(text: str) -> str:
    """`--target` values: a named target or an exact TensorRT version ('trt8.2.3')."""
    from export_gelu.targets import resolve_profile

    if text == "trt":
        return text
    try:
        resolve_profile(text)
    except ExportGeluError as exc:
        raise argparse.ArgumentTypeError(f"invalid choice: {exc}") from None
    return text


TARGET_HELP = (f"one of: {', '.join(TARGET_NAMES)}, or trtX.Y[.Z] for an exact TensorRT "
               "version (7.0 to 11.x, e.g. trt8.2.3, trt10.13)")


TRUST_HELP = (
    "load a model whose loading or running can execute code export-gelu cannot check; only "
    "for a file you trust. Without it: a state_dict or checkpoint loads as tensors only "
    "(torch.load weights_only); a pickled nn.Module is refused (unpickling runs any Python "
    "it names); an ExportedProgram loads with every inner torch.load weights-only and is "
    "refused if it holds AOTInductor libraries or pickled objects, or if its graph calls "
    "anything but tensor ops; a TorchScript file is refused if its code (every method, "
    "function and submodule) reads or writes files (torch.from_file, torch.save), reaches "
    "Python, processes or the network, calls ops outside aten/prim or custom classes, or "
    "defines __setstate__ (it runs while the file loads); ONNX is data: its external data "
    "is read only from the model's own folder, and this flag does not change that")


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr and exit 2 (the full usage is in --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_loading_flags(p: argparse.ArgumentParser) -> None:
    """How the model is loaded: every command that loads MODEL takes these."""
    g = p.add_argument_group("loading the model")
    g.add_argument("--allow-pickle", "--trust-model", dest="allow_pickle", action="store_true",
                   help=TRUST_HELP)
    g.add_argument("--model-factory", metavar="PKG.MODULE:FUNC",
                   help="builds the nn.Module that a state_dict's weights (.pt or "
                        ".safetensors) load into")
    g.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE before loading (repeatable): the library whose types an "
                        "ExportedProgram's inputs/outputs use (transformers and diffusers are "
                        "imported by themselves)")
    g.add_argument("--task", metavar="TASK",
                   help="a Hugging Face folder's task, as optimum names them "
                        "(feature-extraction, fill-mask, text-classification, "
                        "text-generation-with-past, text2text-generation-with-past, ...); "
                        "default: from config.json's architectures")


def add_input_flags(p: argparse.ArgumentParser, files: str = "FILE.npz",
                    files_help: str = "real input arrays, named as the inputs") -> None:
    """The inputs a run feeds: specs, or a file of real data."""
    g = p.add_argument_group("inputs (default: the model's own examples, else made by role)")
    g.add_argument("--input", action="append", default=[], metavar="NAME:SHAPE[:DTYPE[:LOW,HIGH]]",
                   help="a model input, repeatable, in forward() order or named after forward()'s "
                        "parameters (passed by keyword); e.g. x:1x3x224x224 or "
                        "input_ids:1x128:int64:0,30522 (dtypes float32 float16 float64 int64 "
                        "int32 bool; float64 by default for a float64 model); a dim may be a "
                        "name ranged by --dynamic: input_ids:batchxseq:int64")
    g.add_argument("--inputs", dest="inputs_file", metavar=files, help=files_help)


def add_check_flags(p: argparse.ArgumentParser) -> None:
    """How parity and latency are checked: tolerances, threads, device, timed runs."""
    g = p.add_argument_group("checking")
    g.add_argument("--atol", type=float, help="absolute tolerance (default by precision)")
    g.add_argument("--rtol", type=float, help="relative tolerance (default by precision)")
    g.add_argument("--threads", type=int, default=1, help="CPU threads for ORT and torch (1)")
    g.add_argument("--device", choices=DEVICE_CHOICES,
                   help="where the PyTorch reference and ONNX Runtime run: cpu, or cuda (ORT's "
                        "CUDA and TensorRT providers; needs onnxruntime-gpu). Default: cuda "
                        "when torch sees a GPU and ORT has its CUDA provider, else cpu")
    g.add_argument("--iterations", type=int, default=50, help="timed runs per runner (50)")
    g.add_argument("--warmup", type=int, default=5, help="untimed runs first (5)")


def add_report_flags(p: argparse.ArgumentParser) -> None:
    """Where the report goes, and how much a failure shows."""
    g = p.add_argument_group("report")
    g.add_argument("--report", metavar="REPORT.json", help="write the JSON report here")
    g.add_argument("--report-md", metavar="REPORT.md",
                   help="write a Markdown report here, with PNG plots beside it (needs "
                        "matplotlib: the plot extra)")
    g.add_argument("--debug", action="store_true", help="show tracebacks")
    add_quiet_flag(g)


def add_quiet_flag(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--quiet`: no progress lines on stderr (the summary and errors still print)."""
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress on stderr (on a terminal: one line redrawn; in a pipe: "
                        "one line per step as it starts); the summary and errors still print")


def add_run_flags(p: argparse.ArgumentParser, **inputs: str) -> None:
    """The groups every command that runs a model shares."""
    add_loading_flags(p)
    add_input_flags(p, **inputs)
    add_check_flags(p)
    add_report_flags(p)


#: CLI destinations whose options-record field has another name.
_FIELD_OF = {"input": "inputs"}


def options_from(args: argparse.Namespace, record: type[T], **fields: Any) -> T:
    """The options record `record` from parsed flags: every flag whose destination is one of
    its fields (`--input` → inputs), then `fields` (what a command names otherwise)."""
    names = {f.name for f in dataclasses.fields(record)}
    given = {_FIELD_OF.get(k, k): v for k, v in vars(args).items()}
    return record(**{k: v for k, v in given.items() if k in names and k not in fields},
                  **fields)


def export_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(
        prog="export-gelu", usage=EXPORT_USAGE,
        description="Export a PyTorch model (or rewrite an ONNX file) for ONNX Runtime or "
                    "TensorRT 7.0–11, with every GELU found and lowered for the target, then "
                    "check parity with PyTorch and time it.",
        epilog=EXPORT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="model.pt (ExportedProgram, TorchScript, "
                   "pickled module, state_dict; detected by content), weights.safetensors "
                   "(with --model-factory), model.onnx, or a Hugging Face save_pretrained "
                   "folder (config.json + model.safetensors)")
    p.add_argument("--version", action="version", version=f"export-gelu {__version__}")
    p.add_argument("--target", default="trt", type=target_name, metavar="TARGET",
                   help=f"{TARGET_HELP} (default trt)")
    p.add_argument("-o", "--output", metavar="OUT.onnx",
                   help="default: MODEL.<target>.onnx beside MODEL (MODEL.<target>.dynamic.onnx "
                        "with --dynamic); DIR/ (a trailing slash or an existing folder): "
                        "DIR/<that name>, DIR made if missing; a folder (default "
                        "MODEL.<target>/) for an encoder-decoder's graphs. An existing file is "
                        "replaced, and the summary says so")
    p.add_argument("--gelu", default="keep",
                   choices=(*GELU_FORMS, "auto"),
                   help="GELU form: keep (each site's own math; default), erf, tanh, sigmoid "
                        "(changes the math), plugin (TensorRT plugin; computes tanh), auto "
                        "(measure every form; take the fastest within --atol)")
    p.add_argument("--compare-forms", action="store_true",
                   help="export with every GELU form (fused: target onnx; expanded: trt8.6; "
                        "or only --target when given) and print error vs PyTorch and latency")
    p.add_argument("--opset", type=int, metavar="N",
                   help="export opset (default: the target's); on an ONNX input, convert it "
                        "to this opset, down or up (default: up only where the target gains)")
    p.add_argument("--precision", default="fp32", choices=("fp32", "fp16", "bf16"),
                   help="the output graph's float precision (fp32); the default tolerances "
                        "follow it")
    p.add_argument("--cast-down", action="store_true",
                   help="a float64 model: export it in float32 (or --precision) instead of "
                        "float64, and report the error measured against the float64 model")
    p.add_argument("--engine", metavar="OUT.plan", help="save the TensorRT engine (needs a GPU)")
    p.add_argument("--dynamic", action="append", default=[], metavar="DIM=MIN:OPT:MAX",
                   help="a dynamic dim and its range, repeatable: every input axis named DIM "
                        "(in --input, e.g. input_ids:batchxseq:int64, an ONNX input's symbolic "
                        "dim, or a dynamic ExportedProgram's batch/seq) stays symbolic in the "
                        "output, the TensorRT profile takes MIN/OPT/MAX, parity runs at MIN, OPT, "
                        "an odd size and MAX; also DIM=INPUT:AXIS[,INPUT:AXIS]=MIN:OPT:MAX and "
                        "INPUT:AXIS=MIN:OPT:MAX")
    p.add_argument("--static", action="store_true",
                   help="a Hugging Face folder's one graph fixed at its example inputs' sizes "
                        "(default: dynamic batch_size and sequence_length, as optimum names "
                        "them); --dynamic wins over it")
    p.add_argument("--require-trt", action="store_true",
                   help="exit 3 if the TensorRT engine cannot be built here")
    p.add_argument("--bundle", metavar="DIR",
                   help="also write a device bundle for the TensorRT target: the graph, inputs, "
                        "PyTorch's outputs and run_on_device.sh (trtexec/polygraphy) for a box "
                        "export-gelu cannot drive (Jetson, TensorRT 7.x/8.x, trtexec only)")
    p.add_argument("--no-verify", action="store_true", help="skip parity and latency")
    p.add_argument("--localize", action="store_true",
                   help="name where the graph starts to differ from PyTorch (module, node, "
                        "source line) even when parity passes; a failed parity always does")
    p.add_argument("--output-names", metavar="A,B,...",
                   help="names for the graph's outputs, in order (default: the model's own, "
                        "e.g. last_hidden_state, logits; else output_0, output_1, ...)")
    add_run_flags(p)
    return p


def inspect_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(
        prog="export-gelu inspect",
        description="List an ONNX file's GELU sites and, for every target, whether it parses "
                    "the file as is (and why not: an op it lacks, an opset above its ceiling, "
                    "a missing plugin) and whether `export-gelu FILE --target T` would fit it, "
                    "and for TensorRT targets whether this machine can build an engine of that "
                    "version or only the device can. A static check: no GPU or tensorrt "
                    "needed.",
        epilog="examples:\n"
               "  export-gelu inspect model.onnx                      # every target\n"
               "  export-gelu inspect model.onnx --target trt8.2 --target trt8.2.3\n"
               "  export-gelu inspect model.onnx --json --no-dry-run  # for scripts, faster\n"
               "  export-gelu inspect model.onnx --node /Mul_7        # where a node came from\n"
               "\n"
               "exit codes: 0 done; 2 bad input; 3 with --target: that target would not "
               "parse the file as is",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("--target", action="append", default=[], type=target_name,
                   metavar="TARGET", help=f"only this target (repeatable; {TARGET_HELP}; "
                   "'trt' means the installed or newest TensorRT); exit 3 if one would not "
                   "parse it as is")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--no-dry-run", action="store_true",
                   help="skip the 'after export-gelu' column (no passes are run)")
    p.add_argument("--node", action="append", default=[], metavar="NAME",
                   help="also show this node's PyTorch module, class and source line "
                        "(repeatable)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    add_quiet_flag(p)
    return p


def verify_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(
        prog="export-gelu verify",
        description="Check a deployed ONNX file (run in ONNX Runtime) or TensorRT engine "
                    "(.plan/.engine, run in TensorRT) against the PyTorch model on the same "
                    "inputs: per-output max abs/rel, mean abs and p99.9 error, a verdict, and "
                    "latency of both. Exit 1 when an output is over tolerance.",
        epilog="examples:\n"
               "  export-gelu verify model.pt model.onnx\n"
               "  export-gelu verify model.pt model.plan --inputs batch.npz --precision fp16\n"
               "  export-gelu verify model.pt model.onnx --save-inputs in.json "
               "--save-outputs out.json\n"
               "  polygraphy run model.onnx --onnxrt --load-inputs in.json "
               "--load-outputs out.json\n"
               "  export-gelu verify model.pt model.onnx --target trt8.2 --bundle jetson/\n"
               "  export-gelu verify model.pt --bundle jetson/ --device-outputs "
               "jetson/outputs.json --device-times jetson/times.json\n"
               "  export-gelu verify model.pt --bundle forms/ --device-outputs forms/outputs "
               "-o best.onnx",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="the PyTorch model (any format export takes)")
    p.add_argument("deployed", metavar="DEPLOYED", nargs="?",
                   help="model.onnx, or a TensorRT engine (optional with --bundle "
                        "--device-outputs: the bundle's graph)")
    add_run_flags(p, files="FILE.npz|FILE.json",
                  files_help="real inputs: a .npz named as the inputs, or polygraphy's saved "
                             "inputs JSON (polygraphy run --save-inputs; one or more feeds)")
    p.add_argument("--precision", choices=("fp32", "fp16", "bf16"),
                   help="sets the default tolerances (default: read from DEPLOYED's inputs)")
    p.add_argument("--save-inputs", metavar="IN.json",
                   help="save the inputs in polygraphy's format (polygraphy run --load-inputs)")
    p.add_argument("--save-outputs", metavar="OUT.json",
                   help="save both runners' outputs in polygraphy's format (--load-outputs)")
    p.add_argument("--localize", action="store_true",
                   help="name where the graph starts to differ from PyTorch (module, node, "
                        "source line) even when parity passes; a failed parity always does")
    p.add_argument("--no-calibration", action="store_true",
                   help="do not record the GELU sites' input ranges")
    p.add_argument("--bundle", metavar="DIR",
                   help="with DEPLOYED.onnx: also write a device bundle for --target; with "
                        "--device-outputs: the bundle the device ran")
    p.add_argument("--target", default="trt", type=target_name, metavar="TARGET",
                   help=f"the TensorRT version a bundle is written for: {TARGET_HELP} "
                        "(default trt)")
    p.add_argument("--device-outputs", metavar="OUTPUTS.json|DIR",
                   help="outputs a device produced (trtexec --exportOutput or polygraphy "
                        "--save-outputs): judged against MODEL instead of running DEPLOYED; "
                        "for a bundle of GELU forms, the outputs folder its script wrote")
    p.add_argument("-o", "--output", metavar="BEST.onnx",
                   help="with a bundle of GELU forms: write the graph of the form the device "
                        "chose here")
    p.add_argument("--device-times", metavar="TIMES.json",
                   help="trtexec --exportTimes from the same run: the report's TensorRT latency")
    return p


def verify_options(args: argparse.Namespace) -> VerifyOptions:
    """`export-gelu verify` flags → the options verify() takes (checked there)."""
    return options_from(args, VerifyOptions, calibrate=not args.no_calibration,
                        bundle_target=args.target)


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
        targets = ((args.target,) if args.target else ("trt",) if args.bundle
                   else COMPARE_TARGETS)
        options = options_from(args, FormsOptions, targets=targets,
                               inputs_npz=args.inputs_file)
        rep = api.forms_report(args.model, options, progress=Progress(quiet=args.quiet))
        print(rep.summary())
        return 0
    rep = api.export_with_best_form(args.model, export_options(args),
                                    Progress(quiet=args.quiet))
    return _finish_export(rep)


def _finish_export(rep) -> int:  # noqa: ANN001 - a Report (its --report-md written by the API)
    print(rep.summary())
    return rep.exit_code


def export_options(args: argparse.Namespace) -> ExportOptions:
    """Export flags → the options export() takes (checked there, by options.validate)."""
    return options_from(args, ExportOptions, target=args.target or "trt",
                        inputs_npz=args.inputs_file, verify=not args.no_verify)


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
    targets = [resolve_target(t)[0].name for t in args.target]
    progress = Progress(quiet=args.quiet)
    try:
        info = api.inspect_model(args.model, targets or None, dry_run=not args.no_dry_run,
                                 nodes=args.node, progress=progress)
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
