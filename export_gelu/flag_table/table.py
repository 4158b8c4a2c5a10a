"""Every flag of export-gelu, declared once (export_gelu/flags/declare.py says what each field
means). From these records come the argparse parsers `--help` prints, the options records'
fields and the API's keywords (export_gelu/option_records.py, generated), the keywords
export(), verify(), compare_forms() and inspect_model() take, and docs/cli.md's tables.

A new flag is one record here, then `python -m export_gelu.cli_docs --write`; its checks go in
options.validate. The order is `--help`'s within each group and the records' fields'.
"""

from __future__ import annotations

import argparse

from export_gelu.errors import ExportGeluError
from export_gelu.flags.declare import ApiSpec, Flag, RecordSpec
from export_gelu.options import (
    AUTO_KEEP,
    CALIBRATORS,
    COMPARE_TARGETS,
    COMPARED_FORMS,
    DEVICE_CHOICES,
    EXPORT_PRECISIONS,
    GELU_FORMS,
    PRECISIONS,
)
from export_gelu.targets import TARGET_NAMES


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

LOCALIZE_HELP = ("name where the graph starts to differ from PyTorch (module, node, source "
                 "line) even when parity passes; a failed parity always does")

#: Who takes what: export's own flags, compare-forms' (`export-gelu MODEL --compare-forms`),
#: the flags of every command that runs a model, and every command.
EXPORT, FORMS, VERIFY, INSPECT = ("export",), ("compare-forms",), ("verify",), ("inspect",)
EXPORTS = EXPORT + FORMS
RUNS = EXPORTS + VERIFY
ALL = RUNS + INSPECT

FLAGS: tuple[Flag, ...] = (
    # ---- arguments by position (the API's first parameters)
    Flag(("model",), kind="positional", group="positional", commands=EXPORTS, metavar="MODEL",
         help="model.pt (ExportedProgram, TorchScript, pickled module, state_dict; detected by "
              "content), weights.safetensors (with --model-factory), model.onnx, or a Hugging "
              "Face save_pretrained folder (config.json + model.safetensors)"),
    Flag(("model",), kind="positional", group="positional", commands=VERIFY, metavar="MODEL",
         help="the PyTorch model (any format export takes)"),
    Flag(("deployed",), kind="positional", group="positional", commands=VERIFY,
         metavar="DEPLOYED", nargs="?",
         help="model.onnx, or a TensorRT engine (optional with --bundle --device-outputs: the "
              "bundle's graph)"),
    Flag(("model",), kind="positional", group="positional", commands=INSPECT,
         metavar="MODEL.onnx"),
    # ---- export's own
    Flag(("--version",), kind="version", commands=EXPORT),
    Flag(("--target",), commands=EXPORTS, records=("export",), default="trt", parse=target_name,
         metavar="TARGET", help=f"{TARGET_HELP} (default trt)"),
    Flag(("-o", "--output"), commands=EXPORT, records=("export",), path=True,
         metavar="OUT.onnx",
         help="default: MODEL.<target>.onnx beside MODEL (MODEL.<target>.dynamic.onnx with "
              "--dynamic); DIR/ (a trailing slash or an existing folder): DIR/<that name>, DIR "
              "made if missing; a folder (default MODEL.<target>/) for an encoder-decoder's "
              "graphs. An existing file is replaced, and the summary says so"),
    Flag(("--gelu",), commands=EXPORT, records=("export",), default="keep",
         choices=(*GELU_FORMS, "auto"),
         help="GELU form: keep (each site's own math; default), erf, tanh, sigmoid (changes the "
              "math), plugin (TensorRT plugin; computes tanh), auto (measure every form; take "
              "the fastest within --atol)"),
    Flag(("--compare-forms",), kind="switch", commands=EXPORT,
         help="export with every GELU form (fused: target onnx; expanded: trt8.6; or only "
              "--target when given) and print error vs PyTorch and latency"),
    Flag(("--opset",), commands=EXPORT, records=("export",), parse=int, metavar="N",
         help="export opset (default: the target's); on an ONNX input, convert it to this "
              "opset, down or up (default: up only where the target gains)"),
    Flag(("--precision",), commands=EXPORTS, records=("run",), default="fp32",
         choices=EXPORT_PRECISIONS, type="str | None",
         help="the output graph's precision (fp32); the default tolerances follow it. int8 and "
              "fp8 quantize the fp32 graph for the target (Q/DQ on the weight products' "
              "inputs, never inside a GELU; a TensorRT 7.x calibration cache) and judge it "
              "against PyTorch at the same scales (docs/quantization.md)"),
    Flag(("--calibration-data",), commands=EXPORT, records=("export", "forms"), path=True,
         metavar="FILE.npz|FILE.json",
         help="with int8/fp8: the inputs activation ranges are measured on (a .npz named as "
              "the inputs, or polygraphy's inputs JSON of several feeds); default: generated "
              "inputs, whose ranges are indicative"),
    Flag(("--calibrator",), commands=EXPORT, records=("export", "forms"), choices=CALIBRATORS,
         type="str | None",
         help="with int8/fp8: ONNX Runtime's calibrator for the activation ranges (default: "
              "percentile for int8, minmax for fp8)"),
    Flag(("--keep-precision",), kind="repeat", commands=EXPORT, records=("export", "forms"),
         metavar="MODULE",
         help=f"with int8/fp8: keep this module's weight products (a module path or a prefix "
              f"of one) in float, repeatable; '{AUTO_KEEP}': keep the fewest most sensitive "
              "modules until --target-sqnr is met"),
    Flag(("--target-sqnr",), commands=EXPORT, records=("export", "forms"), parse=float,
         type="float | None", metavar="DB",
         help="with --keep-precision auto: the output SQNR against fp32 to reach (default 30 "
              "dB: an RMS error of about 3 percent)"),
    Flag(("--cast-down",), kind="switch", commands=EXPORT, records=("export",),
         help="a float64 model: export it in float32 (or --precision) instead of float64, and "
              "report the error measured against the float64 model"),
    Flag(("--engine",), commands=EXPORT, records=("export",), path=True, metavar="OUT.plan",
         help="save the TensorRT engine (needs a GPU)"),
    Flag(("--dynamic",), kind="repeat", commands=EXPORT, records=("export",),
         metavar="DIM=MIN:OPT:MAX",
         help="a dynamic dim and its range, repeatable: every input axis named DIM (in "
              "--input, e.g. input_ids:batchxseq:int64, an ONNX input's symbolic dim, or a "
              "dynamic ExportedProgram's batch/seq) stays symbolic in the output, the TensorRT "
              "profile takes MIN/OPT/MAX, parity runs at MIN, OPT, an odd size and MAX; also "
              "DIM=INPUT:AXIS[,INPUT:AXIS]=MIN:OPT:MAX and INPUT:AXIS=MIN:OPT:MAX"),
    Flag(("--static",), kind="switch", commands=EXPORT, records=("export",),
         help="a Hugging Face folder's one graph fixed at its example inputs' sizes (default: "
              "dynamic batch_size and sequence_length, as optimum names them); --dynamic wins "
              "over it"),
    Flag(("--require-trt",), kind="switch", commands=EXPORT, records=("export",),
         help="exit 3 if the TensorRT engine cannot be built here"),
    Flag(("--bundle",), commands=EXPORTS, records=("export", "forms"), path=True,
         metavar="DIR",
         help="also write a device bundle for the TensorRT target: the graph, inputs, "
              "PyTorch's outputs and run_on_device.sh (trtexec/polygraphy) for a box "
              "export-gelu cannot drive (Jetson, TensorRT 7.x/8.x, trtexec only)"),
    Flag(("--no-verify",), kind="switch", commands=EXPORT, records=("export",),
         help="skip parity and latency"),
    # ---- verify's own (export's --localize and --output-names fall between, in that order)
    Flag(("--precision",), commands=VERIFY, records=("verify",), choices=PRECISIONS,
         type="str | None",
         help="sets the default tolerances (default: read from DEPLOYED's inputs)"),
    Flag(("--save-inputs",), commands=VERIFY, records=("verify",), path=True,
         metavar="IN.json",
         help="save the inputs in polygraphy's format (polygraphy run --load-inputs)"),
    Flag(("--save-outputs",), commands=VERIFY, records=("verify",), path=True,
         metavar="OUT.json",
         help="save both runners' outputs in polygraphy's format (--load-outputs)"),
    Flag(("--localize",), kind="switch", commands=EXPORT + VERIFY,
         records=("export", "verify"), help=LOCALIZE_HELP),
    Flag(("--output-names",), commands=EXPORT, records=("export",), metavar="A,B,...",
         type="str | tuple[str, ...] | None", api_type="str | Sequence[str] | None",
         help="names for the graph's outputs, in order (default: the model's own, e.g. "
              "last_hidden_state, logits; else output_0, output_1, ...)"),
    Flag(("--no-calibration",), kind="switch", commands=VERIFY, records=("verify",),
         field="calibrate", help="do not record the GELU sites' input ranges"),
    Flag(("--bundle",), commands=VERIFY, records=("verify",), path=True, metavar="DIR",
         help="with DEPLOYED.onnx: also write a device bundle for --target; with "
              "--device-outputs: the bundle the device ran"),
    Flag(("--target",), commands=VERIFY, records=("verify",), field="bundle_target",
         default="trt", parse=target_name, metavar="TARGET",
         help=f"the TensorRT version a bundle is written for: {TARGET_HELP} (default trt)"),
    Flag(("--device-outputs",), commands=VERIFY, records=("verify",), path=True,
         metavar="OUTPUTS.json|DIR",
         help="outputs a device produced (trtexec --exportOutput or polygraphy "
              "--save-outputs): judged against MODEL instead of running DEPLOYED; for a bundle "
              "of GELU forms, the outputs folder its script wrote"),
    Flag(("-o", "--output"), commands=VERIFY, records=("verify",), path=True,
         metavar="BEST.onnx",
         help="with a bundle of GELU forms: write the graph of the form the device chose "
              "here"),
    Flag(("--device-times",), commands=VERIFY, records=("verify",), path=True,
         metavar="TIMES.json",
         help="trtexec --exportTimes from the same run: the report's TensorRT latency"),
    # ---- inspect's own
    Flag(("--target",), kind="repeat", commands=INSPECT, records=("inspect",),
         keywords=("targets", "target"), parse=target_name, metavar="TARGET",
         help=f"only this target (repeatable; {TARGET_HELP}; 'trt' means the installed or "
              "newest TensorRT); exit 3 if one would not parse it as is"),
    Flag(("--json",), kind="switch", commands=INSPECT,
         help="print JSON instead of a table"),
    Flag(("--no-dry-run",), kind="switch", commands=INSPECT, records=("inspect",),
         help="skip the 'after export-gelu' column (no passes are run)"),
    Flag(("--node",), kind="repeat", commands=INSPECT, records=("inspect",),
         keywords=("nodes", "node"), metavar="NAME",
         help="also show this node's PyTorch module, class and source line (repeatable)"),
    # ---- loading the model
    Flag(("--allow-pickle", "--trust-model"), kind="switch", group="loading", commands=RUNS,
         records=("run",), help=TRUST_HELP),
    Flag(("--model-factory",), group="loading", commands=RUNS, records=("run",),
         metavar="PKG.MODULE:FUNC",
         help="builds the nn.Module that a state_dict's weights (.pt or .safetensors) load "
              "into"),
    Flag(("--import",), kind="repeat", group="loading", commands=RUNS, records=("run",),
         metavar="MODULE",
         help="import MODULE before loading (repeatable): the library whose types an "
              "ExportedProgram's inputs/outputs use (transformers and diffusers are imported "
              "by themselves)"),
    Flag(("--task",), group="loading", commands=RUNS, records=("run",), metavar="TASK",
         help="a Hugging Face folder's task, as optimum names them (feature-extraction, "
              "fill-mask, text-classification, text-generation-with-past, "
              "text2text-generation-with-past, ...); default: from config.json's "
              "architectures"),
    # ---- inputs
    Flag(("--input",), kind="repeat", group="inputs", commands=RUNS, records=("run",),
         field="inputs", metavar="NAME:SHAPE[:DTYPE[:LOW,HIGH]]",
         help="a model input, repeatable, in forward() order or named after forward()'s "
              "parameters (passed by keyword); e.g. x:1x3x224x224 or "
              "input_ids:1x128:int64:0,30522 (dtypes float32 float16 float64 int64 int32 "
              "bool; float64 by default for a float64 model); a dim may be a name ranged by "
              "--dynamic: input_ids:batchxseq:int64"),
    Flag(("--inputs",), group="inputs", commands=EXPORTS, records=("export", "forms"),
         field="inputs_npz", path=True, metavar="FILE.npz",
         help="real input arrays, named as the inputs"),
    Flag(("--inputs",), group="inputs", commands=VERIFY, records=("verify",),
         field="inputs_file", path=True, metavar="FILE.npz|FILE.json",
         help="real inputs: a .npz named as the inputs, or polygraphy's saved inputs JSON "
              "(polygraphy run --save-inputs; one or more feeds)"),
    # ---- checking
    Flag(("--atol",), group="checking", commands=RUNS, records=("run",), parse=float,
         help="absolute tolerance (default by precision)"),
    Flag(("--rtol",), group="checking", commands=RUNS, records=("run",), parse=float,
         help="relative tolerance (default by precision)"),
    Flag(("--threads",), group="checking", commands=RUNS, records=("run",), parse=int,
         default=1, help="CPU threads for ORT and torch (1)"),
    Flag(("--device",), group="checking", commands=RUNS, records=("run",),
         choices=DEVICE_CHOICES,
         help="where the PyTorch reference and ONNX Runtime run: cpu, or cuda (ORT's CUDA and "
              "TensorRT providers; needs onnxruntime-gpu). Default: cuda when torch sees a GPU "
              "and ORT has its CUDA provider, else cpu"),
    Flag(("--iterations",), group="checking", commands=RUNS, records=("run",), parse=int,
         default=50, help="timed runs per runner (50)"),
    Flag(("--warmup",), group="checking", commands=RUNS, records=("run",), parse=int,
         default=5, help="untimed runs first (5)"),
    # ---- report
    Flag(("--report",), group="report", commands=RUNS, records=("export", "verify", "forms"),
         path=True, metavar="REPORT.json", help="write the JSON report here"),
    Flag(("--report-md",), group="report", commands=RUNS,
         records=("export", "verify", "forms"), path=True, metavar="REPORT.md",
         help="write a Markdown report here, with PNG plots beside it (needs matplotlib: the "
              "plot extra)"),
    Flag(("--debug",), kind="switch", group="report", commands=ALL,
         help="show tracebacks"),
    Flag(("-q", "--quiet"), kind="switch", group="report", commands=ALL,
         help="no progress on stderr (on a terminal: one line redrawn; in a pipe: one line per "
              "step as it starts); the summary and errors still print"),
    # ---- compare_forms()'s own keywords (no flag: the CLI compares what --target says)
    Flag((), kind="repeat", commands=FORMS, records=("forms",), keywords=("targets",),
         default=COMPARE_TARGETS,
         help="the targets whose graphs are compared (target= names one)"),
    Flag((), kind="repeat", commands=FORMS, records=("forms",), keywords=("forms",),
         default=COMPARED_FORMS, help="the GELU forms compared"),
    Flag((), commands=FORMS, records=("forms",), keywords=("workdir",), path=True,
         help="a folder that keeps the graphs (default: a temporary one)"),
)

RECORDS = (
    RecordSpec("run", "RunOptions", base="OptionsRecord",
               doc="What every command takes: the model's inputs and loading, tolerances, how "
                   "to run."),
    RecordSpec("export", "ExportOptions",
               doc="`export-gelu MODEL ...` and `export_gelu.export(model, ...)`."),
    RecordSpec("verify", "VerifyOptions",
               doc="`export-gelu verify MODEL DEPLOYED ...` and `export_gelu.verify(...)`."),
    RecordSpec("forms", "FormsOptions",
               doc="`export-gelu MODEL --compare-forms` and "
                   "`export_gelu.compare_forms(model, ...)`."),
    RecordSpec("inspect", "InspectOptions",
               doc="`export-gelu inspect MODEL.onnx ...` and `export_gelu.inspect_model(...)`."),
)

APIS = (
    ApiSpec("export", "ExportKeywords", EXPORTS, cli_only=True),
    ApiSpec("verify", "VerifyKeywords", VERIFY),
    ApiSpec("compare_forms", "FormsKeywords", FORMS),
    ApiSpec("inspect_model", "InspectKeywords", INSPECT, own=("targets", "dry_run", "json")),
)
