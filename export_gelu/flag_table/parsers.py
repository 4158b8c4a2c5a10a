"""What each command's `--help` prints around its flags: the usage line, the description, the
examples and exit codes, and the flag groups in order."""

from __future__ import annotations

from export_gelu.flags.declare import ParserSpec
from export_gelu.version import __version__

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
  export-gelu bert.pkl --allow-pickle --target trt8.2 --input input_ids:batchxseq:int64:0,30522 \\
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

VERIFY_EXAMPLES = """\
examples:
  export-gelu verify model.pt model.onnx
  export-gelu verify model.pt model.plan --inputs batch.npz --precision fp16
  export-gelu verify model.pt model.onnx --save-inputs in.json --save-outputs out.json
  polygraphy run model.onnx --onnxrt --load-inputs in.json --load-outputs out.json
  export-gelu verify model.pt model.onnx --target trt8.2 --bundle jetson/
  export-gelu verify model.pt --bundle jetson/ --device-outputs jetson/outputs.json \\
      --device-times jetson/times.json
  export-gelu verify model.pt --bundle forms/ --device-outputs forms/outputs -o best.onnx"""

INSPECT_EXAMPLES = """\
examples:
  export-gelu inspect model.onnx                      # every target
  export-gelu inspect model.onnx --target trt8.2 --target trt8.2.3
  export-gelu inspect model.onnx --json --no-dry-run  # for scripts, faster
  export-gelu inspect model.onnx --node /Mul_7        # where a node came from

exit codes: 0 done; 2 bad input; 3 with --target: that target would not parse the file as is"""

#: The groups of the commands that run a model, after their own flags' group.
_LOADING = ("loading", "loading the model")
_INPUTS = ("inputs", "inputs (default: the model's own examples, else made by role)")
_RUN_GROUPS = (_LOADING, _INPUTS, ("checking", "checking"), ("report", "report"))

PARSERS = {
    "export": ParserSpec(
        "export", prog="export-gelu", usage=EXPORT_USAGE, version=f"export-gelu {__version__}",
        description="Export a PyTorch model (or rewrite an ONNX file) for ONNX Runtime or "
                    "TensorRT 7.0–11, with every GELU found and lowered for the target, then "
                    "check parity with PyTorch and time it.",
        epilog=EXPORT_EXAMPLES,
        groups=(("positional", None), ("options", None), *_RUN_GROUPS)),
    "verify": ParserSpec(
        "verify", prog="export-gelu verify",
        description="Check a deployed ONNX file (run in ONNX Runtime) or TensorRT engine "
                    "(.plan/.engine, run in TensorRT) against the PyTorch model on the same "
                    "inputs: per-output max abs/rel, mean abs and p99.9 error, a verdict, and "
                    "latency of both. Exit 1 when an output is over tolerance.",
        epilog=VERIFY_EXAMPLES,
        groups=(("positional", None), *_RUN_GROUPS, ("options", None))),
    "inspect": ParserSpec(
        "inspect", prog="export-gelu inspect",
        description="List an ONNX file's GELU sites and, for every target, whether it parses "
                    "the file as is (and why not: an op it lacks, an opset above its ceiling, "
                    "a missing plugin) and whether `export-gelu FILE --target T` would fit it, "
                    "and for TensorRT targets whether this machine can build an engine of that "
                    "version or only the device can. A static check: no GPU or tensorrt "
                    "needed.",
        epilog=INSPECT_EXAMPLES,
        groups=(("positional", None), ("options", None), ("report", None))),
}
