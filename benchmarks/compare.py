"""Compare the latency of your own ONNX files, paired and interleaved, in ONNX Runtime.

    .venv/bin/python -m benchmarks.compare raw.onnx out.onnx [more.onnx ...]
        [--input NAME:SHAPE[:DTYPE[:LOW,HIGH]] ... | --inputs FILE.npz]
        [--threads 1] [--rounds 60] [--warmup 10] [--runs 3] [--replicas 3]
        [--atol 1e-4] [--cuda] [--markdown FILE]

Example, after `export-gelu model.onnx --target ort -o model.ort.onnx`:

    .venv/bin/python -m benchmarks.compare model.onnx model.ort.onnx

The first file is the baseline. Every file gets the same inputs (random over the first
file's fixed shape unless given); their outputs must agree within `--atol` before anything is
timed. Then they run interleaved in rotating order (`benchmarks/harness.py`), in `--runs`
fresh repetitions that are pooled: each file's median and p90, and its paired ratio to the
baseline with a bootstrap 95% interval and each run's own ratio. Also printed: the ops each
file holds and the ops ONNX Runtime runs after its own optimizer.

Exit status: 0 compared; 1 the files compute different outputs; 2 bad input (a file that is
missing or not ONNX, inputs that do not fit, a provider that is not there).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.common import Variant, compare_variants, conditions, load_average
from export_gelu.check.inputs.input_resolver import InputRequest, resolve_inputs
from export_gelu.errors import BadInputError
from export_gelu.exporter.feeds.feeds import fit_to_model
from export_gelu.exporter.inputs.specs import SPEC_HELP
from export_gelu.exporter.loading.load import load_model


def _labels(paths: list[Path]) -> list[str]:
    """File names, or the paths as given where two files share a name."""
    names = [p.name for p in paths]
    return [str(p) if names.count(p.name) > 1 else p.name for p in paths]


def _check_files(paths: list[Path]) -> None:
    import onnx

    for path in paths:
        if not path.is_file():
            raise BadInputError(f"{path}: no such file")
        try:
            onnx.load(str(path), load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the same bad input
            raise BadInputError(f"{path}: not an ONNX model ({type(exc).__name__})") from exc


def _providers(cuda: bool) -> list[str] | None:
    if not cuda:
        return None
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise BadInputError("--cuda: this onnxruntime has no CUDAExecutionProvider "
                            f"(it has {', '.join(ort.get_available_providers())})")
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", type=Path, help="ONNX files; the first is the baseline")
    p.add_argument("--input", action="append", default=[], metavar="SPEC",
                   help=f"an input, {SPEC_HELP} (repeat per input)")
    p.add_argument("--inputs", metavar="FILE.npz", help="inputs by name from a .npz")
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    p.add_argument("--rounds", type=int, default=60, help="timed rounds per run")
    p.add_argument("--warmup", type=int, default=10, help="warm-up runs per session")
    p.add_argument("--runs", type=int, default=3, help="fresh runs (new sessions), pooled")
    p.add_argument("--replicas", type=int, default=3,
                   help="sessions per file, rotated round by round")
    p.add_argument("--atol", type=float, default=1e-4,
                   help="largest absolute output difference to the baseline allowed")
    p.add_argument("--cuda", action="store_true", help="run on ORT's CUDA provider")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write the tables here")
    args = p.parse_args(argv)
    try:
        if len(args.files) < 2:
            raise BadInputError("give at least two ONNX files (the first is the baseline)")
        if min(args.threads, args.rounds, args.runs, args.replicas) < 1 or args.warmup < 0:
            raise BadInputError("--threads, --rounds, --runs and --replicas must be ≥ 1, "
                                "--warmup ≥ 0")
        _check_files(args.files)
        if args.input and args.inputs:
            raise BadInputError("give either --input specs or --inputs FILE.npz, not both")
        request = InputRequest(specs=tuple(args.input or ()),
                               inputs_file=Path(args.inputs) if args.inputs else None)
        feed = resolve_inputs(load_model(args.files[0]), request).feed  # the export's resolver
        for path in args.files[1:]:
            fit_to_model(load_model(path), feed)  # the same feed must fit every file
        providers = _providers(args.cuda)
        load_before = load_average()
        variants = [Variant(label, path) for label, path in zip(_labels(args.files), args.files)]
        _comp, text = compare_variants(f"{len(variants)} files, baseline {variants[0].label}",
                                       variants, dict(feed), args.rounds, args.warmup,
                                       args.threads, args.atol, providers, args.replicas,
                                       args.runs)
    except BadInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except AssertionError as exc:  # the harness refuses files whose outputs differ
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime refusing a file is bad input
        print(f"error: ONNX Runtime could not run the files: {str(exc).splitlines()[0][:300]}",
              file=sys.stderr)
        return 2
    note = (f"{args.runs} fresh run(s) of {args.rounds} rounds each, after {args.warmup} "
            "warm-up runs per session, pooled")
    how = conditions(args.threads, note, load_before, args.replicas)
    if args.cuda:
        how = how.replace("ONNX Runtime CPU EP", "ONNX Runtime CUDA EP")
    print(how)
    if args.markdown:
        args.markdown.write_text(how + "\n" + text)
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
