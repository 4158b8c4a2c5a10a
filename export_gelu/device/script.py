"""The commands a device runs on a bundle: trtexec's flags for one TensorRT version, the POSIX
`run_on_device.sh` around them, and the polygraphy equivalent.

Which flag a version needs is data (`FLAG_RULES`), each row checked against the flags that
version's trtexec parses (`trtexec_flags.accepted_flags`, read from NVIDIA/TensorRT's source).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from export_gelu.device.trtexec_flags import accepted_flags, line_of, source_of
from export_gelu.errors import BadInputError
from export_gelu.trt_parser.versions import in_range

#: trtexec's own default warm-up (ms), passed explicitly: before 8.6 the --exportTimes file
#: also holds the warm-up runs, which verify drops by their start time.
WARMUP_MS = 200
#: Timed inferences (trtexec runs at least this many, and at least --duration seconds).
ITERATIONS = 100
#: Workspace for versions whose default is small (7.x–8.2: 16 MiB), in MiB; WORKSPACE_MIB
#: overrides it on the device.
WORKSPACE_MIB = 1024

Shape = tuple[int, ...]


@dataclass(frozen=True)
class FlagRule:
    """One trtexec flag a run needs on versions `since` <= v < `fixed_in`, when `when` holds."""

    key: str
    text: str  # the flag, with {placeholders} filled from the run
    when: str  # always | fp16 | bf16 | dynamic | plugin
    why: str
    since: str | None = None
    fixed_in: str | None = None

    @property
    def flag(self) -> str:
        return self.text.split("=", 1)[0]

    def applies(self, version: str, conditions: set[str]) -> bool:
        return in_range(version, self.since, self.fixed_in) and (
            self.when == "always" or self.when in conditions)


#: Version facts, each read in that version's samples/common/sampleOptions.cpp (see
#: docs/device-verification.md for the tags).
FLAG_RULES: tuple[FlagRule, ...] = (
    FlagRule("explicit_batch", "--explicitBatch", "always",
             "the ONNX parser needs an explicit-batch network; from 8.2 trtexec sets it for ONNX "
             "and the flag is deprecated (\"has no effect\")", fixed_in="8.2"),
    FlagRule("workspace", "--workspace=$WORKSPACE_MIB", "always",
             "the default workspace (16 MiB) is too small for transformer tactics; --workspace "
             "is deprecated by --memPoolSize from 8.4 and gone in 10", fixed_in="8.4"),
    FlagRule("fp16", "--fp16", "fp16", "weakly typed networks take precision as a builder flag; "
             "TensorRT 11's trtexec has no --fp16 (strongly typed: the graph's types decide)",
             fixed_in="11"),
    FlagRule("bf16", "--bf16", "bf16", "bf16 builder flag, from 9.x up to 10.x", since="9",
             fixed_in="11"),
    FlagRule("no_tf32", "--noTF32", "always",
             "TF32 is on by default from 7.1 and changes fp32 matmul results by ~1e-3; "
             "export-gelu's own engine builds (polygraphy) leave it off", since="7.1"),
    FlagRule("min_shapes", "--minShapes={min}", "dynamic", "optimization profile"),
    FlagRule("opt_shapes", "--optShapes={opt}", "dynamic", "optimization profile"),
    FlagRule("max_shapes", "--maxShapes={max}", "dynamic", "optimization profile"),
    FlagRule("shapes", "--shapes={shapes}", "dynamic", "the shapes the inputs are run at"),
)

#: Flags every run passes (also checked against the version's table).
BASE_FLAGS = ("--onnx=model.onnx", "--loadInputs={load_inputs}", "--saveEngine=model.plan",
              "--exportOutput=outputs.json", "--exportTimes=times.json",
              f"--warmUp={WARMUP_MS}", f"--iterations={ITERATIONS}")

#: Where JetPack installs trtexec (not on PATH there).
JETSON_TRTEXEC = "/usr/src/tensorrt/bin/trtexec"
#: The script's trtexec: $TRTEXEC, else the one on PATH, else JetPack's; else exit 127.
FIND_TRTEXEC = f"""TRTEXEC=${{TRTEXEC:-}}
if [ -z "$TRTEXEC" ]; then
    if command -v trtexec >/dev/null 2>&1; then
        TRTEXEC=trtexec
    elif [ -x {JETSON_TRTEXEC} ]; then
        TRTEXEC={JETSON_TRTEXEC}
    else
        echo "run_on_device.sh: trtexec is neither on PATH nor at" \\
            "{JETSON_TRTEXEC}; set TRTEXEC=/path/to/trtexec" >&2
        exit 127
    fi
fi
"""


def dims_text(shape: Sequence[int]) -> str:
    return "x".join(str(int(d)) for d in shape)


def check_tensor_name(name: str) -> None:
    """trtexec splits `name:value` lists on ',' and ':': refuse names it would misread."""
    bad = [c for c in ",:'\" \t\n" if c in name]
    if bad or not name:
        raise BadInputError(f"input {name!r}: trtexec's --loadInputs/--shapes lists cannot carry "
                            "a name with ',', ':', quotes or spaces; rename the graph input")


def _shape_list(shapes: Mapping[str, Shape]) -> str:
    return ",".join(f"{n}:{dims_text(s)}" for n, s in shapes.items())


#: trtexec's per-layer precision flags (parsed from 8.4 on; see the flag table).
LAYER_PRECISION_FLAGS = ("--precisionConstraints", "--layerPrecisions")


def island_flags(trt_version: str, precision: str, fp32_layers: Sequence[str]) -> list[str]:
    """`--precisionConstraints=obey --layerPrecisions=L:fp32,…`: the fp32 islands of an fp16
    graph (compat/precision/fp16_islands.py) kept in fp32 by a weakly typed build. [] when there
    are none, when the version's trtexec does not parse the flags (an island's Casts then
    stand alone), or from 11 (strongly typed: the graph's Casts decide). Layers take their
    ONNX node's name; one trtexec would misread is left out."""
    known = accepted_flags(trt_version)
    usable = [n for n in fp32_layers if n and not any(c in n for c in ",:'\" \t\n")]
    if (precision != "fp16" or not usable or in_range(trt_version, since="11")
            or not all(f in known for f in LAYER_PRECISION_FLAGS)):
        return []
    return ["--precisionConstraints=obey",
            "--layerPrecisions=" + ",".join(f"{n}:fp32" for n in usable)]


def trtexec_args(trt_version: str, precision: str, input_files: Mapping[str, str],
                 shapes: Mapping[str, Shape],
                 profile: Mapping[str, tuple[Shape, Shape, Shape]] | None,
                 fp32_layers: Sequence[str] = ()) -> list[str]:
    """trtexec's arguments for this bundle (workspace as `$WORKSPACE_MIB`, expanded by sh).

    `profile` (name → MIN, OPT, MAX) is given when an input has a dynamic axis; then the
    optimization profile and the run shapes are passed. Every flag is checked against the
    version's table: a flag it does not parse is a bug here (ValueError).
    """
    for name in input_files:
        check_tensor_name(name)
    conditions = {precision}
    if profile:
        conditions.add("dynamic")
    values = {"load_inputs": ",".join(f"{n}:{f}" for n, f in input_files.items()),
              "shapes": _shape_list(shapes)}
    if profile:
        for i, key in enumerate(("min", "opt", "max")):
            values[key] = _shape_list({n: p[i] for n, p in profile.items()})
    args = [a.format(**values) for a in BASE_FLAGS]
    args += [r.text.format(**values) for r in FLAG_RULES if r.applies(trt_version, conditions)]
    args += island_flags(trt_version, precision, fp32_layers)
    if precision == "bf16" and not in_range(trt_version, since="9"):
        raise BadInputError(f"bf16 needs TensorRT 9 or newer (bundle for {trt_version})")
    check_flags(args, trt_version)
    return args


def quantized_polygraphy_args(trtexec_flags: Sequence[str], cache: str) -> list[str]:
    """polygraphy's flags for an INT8/FP8 build asked of trtexec as `trtexec_flags`: the
    precision, fp16 for the float layers, the calibration cache of TensorRT 7.x."""
    args = [f for f in ("--int8", "--fp8", "--fp16") if f in trtexec_flags]
    if any(f.startswith("--calib=") for f in trtexec_flags):
        args += ["--calibration-cache", cache]
    return args


def check_flags(args: Sequence[str], trt_version: str) -> None:
    """Raise ValueError naming any flag the trtexec of `trt_version` would reject."""
    known = accepted_flags(trt_version)
    unknown = [a.split("=", 1)[0] for a in args if a.split("=", 1)[0] not in known]
    if unknown:
        raise ValueError(f"trtexec {line_of(trt_version)} does not parse {', '.join(unknown)} "
                         f"({source_of(trt_version)})")


def plugin_flag(trt_version: str) -> str:
    """How a plugin library is passed: --plugins on every line (7.0–11), per the table."""
    return "--plugins" if "--plugins" in accepted_flags(trt_version) else "--staticPlugins"


def polygraphy_args(precision: str, trt_version: str,
                    profile: Mapping[str, tuple[Shape, Shape, Shape]] | None,
                    fp32_layers: Sequence[str] = ()) -> list[str]:
    """`polygraphy run` arguments doing what the trtexec run does, for boxes that have it."""
    args = ["run", "model.onnx", "--trt", "--load-inputs", "inputs.json",
            "--save-outputs", "outputs.json", "--save-engine", "model.plan"]
    if precision == "fp16" and in_range(trt_version, fixed_in="11"):
        args.append("--fp16")
        if fp32_layers:  # the fp32 islands, as island_flags gives trtexec
            args += ["--precision-constraints", "obey", "--layer-precisions",
                     *[f"{n}:float32" for n in fp32_layers]]
    if precision == "bf16" and in_range(trt_version, fixed_in="11"):
        args.append("--bf16")
    if in_range(trt_version, since="11"):
        args.append("--strongly-typed")
    for i, flag in enumerate(("--trt-min-shapes", "--trt-opt-shapes", "--trt-max-shapes")):
        if profile:
            args.append(flag)
            args += [f"{n}:[{','.join(str(d) for d in p[i])}]" for n, p in profile.items()]
    return args


#: The graph copy whose module-boundary tensors are outputs too, and what a run of it writes.
MARKED_GRAPH = "model_marked.onnx"
MODULE_OUTPUTS = "module_outputs.json"


def localize_trtexec_args(trtexec: Sequence[str]) -> list[str]:
    """trtexec's arguments for the marked graph: the same inputs and flags, its outputs (the
    graph's and the module-boundary tensors) to MODULE_OUTPUTS; no engine kept, not timed."""
    swap = {"--onnx=model.onnx": f"--onnx={MARKED_GRAPH}",
            "--exportOutput=outputs.json": f"--exportOutput={MODULE_OUTPUTS}",
            f"--iterations={ITERATIONS}": "--iterations=1"}
    return [swap.get(a, a) for a in trtexec
            if a not in ("--saveEngine=model.plan", "--exportTimes=times.json")]


def localize_polygraphy_args(polygraphy: Sequence[str], names: Sequence[str]) -> list[str]:
    """`polygraphy run` on the bundle's own graph, asking TensorRT for `names` as well
    (`--trt-outputs mark`-style, by name), saved to MODULE_OUTPUTS."""
    args = list(polygraphy)
    args[args.index("outputs.json")] = MODULE_OUTPUTS
    at = args.index("--save-engine")
    del args[at:at + 2]
    return [*args, "--trt-outputs", *names]


def _localize_mode(localize: Sequence[str], plugin: str) -> str:
    """The `localize` mode of run_on_device.sh (trtexec on the marked graph), or ""."""
    if not localize:
        return ""
    return f"""
if [ "$MODE" = localize ]; then
    set -- {_quote(localize)}
    if [ -n "${{PLUGIN_LIB:-}}" ]; then
        set -- "$@" "{plugin}=$PLUGIN_LIB"
    fi
    echo "+ $TRTEXEC $*"
    "$TRTEXEC" "$@" > localize.log 2>&1 || {{
        echo "run_on_device.sh: trtexec failed on {MARKED_GRAPH}; see localize.log" >&2
        exit 1
    }}
    echo "run_on_device.sh: done; copy back {MODULE_OUTPUTS}"
    exit 0
fi
"""


def _quote(args: Sequence[str]) -> str:
    """Arguments for sh, one per line; `$WORKSPACE_MIB` stays expandable."""
    out = []
    for a in args:
        q = shlex.quote(a)
        if "$WORKSPACE_MIB" in a:
            q = '"' + a.replace('"', '\\"') + '"'
        out.append(q)
    return " \\\n    ".join(out)


def run_script(trt_version: str, target: str, precision: str, trtexec: Sequence[str],
               polygraphy: Sequence[str], *, has_plugin: bool, tool_version: str,
               localize: Sequence[str] = ()) -> str:
    """`run_on_device.sh`: POSIX sh, needs only TensorRT (polygraphy for its own mode);
    `localize`: trtexec's arguments for the marked graph (its `localize` mode)."""
    plugin = plugin_flag(trt_version)
    usage = (f"#   sh run_on_device.sh localize     # the module outputs too ({MARKED_GRAPH})\n"
             if localize else "")
    modes = "trtexec, localize or polygraphy" if localize else "trtexec or polygraphy"
    known = ('[ "$MODE" != trtexec ] && [ "$MODE" != localize ]' if localize
             else '[ "$MODE" != trtexec ]')
    plugin_note = ("# The graph holds CustomGeluPluginDynamic: it is in libnvinfer_plugin, which "
                   "trtexec loads\n# by default; PLUGIN_LIB=/path/lib.so adds another library.\n"
                   if has_plugin else "")
    return f"""#!/bin/sh
# Generated by export-gelu {tool_version} for {target} (TensorRT {trt_version}), {precision}.
# Every trtexec flag below is one that TensorRT {line_of(trt_version)}'s trtexec parses
# ({source_of(trt_version)}).
#
#   sh run_on_device.sh              # trtexec (PATH, or {JETSON_TRTEXEC} on Jetson)
#   sh run_on_device.sh polygraphy   # polygraphy run, where polygraphy is installed
{usage}#
# Environment: TRTEXEC=/path/to/trtexec, WORKSPACE_MIB (default {WORKSPACE_MIB}),
# PLUGIN_LIB=/path/to/extra_plugins.so. Copy back outputs.json and times.json (README.txt).
{plugin_note}set -u
cd "$(dirname "$0")" || exit 2
WORKSPACE_MIB=${{WORKSPACE_MIB:-{WORKSPACE_MIB}}}
MODE=${{1:-trtexec}}

if [ "$MODE" = polygraphy ]; then
    if ! command -v polygraphy >/dev/null 2>&1; then
        echo "run_on_device.sh: polygraphy is not installed here;" \\
            "run without arguments to use trtexec" >&2
        exit 127
    fi
    set -- {_quote(polygraphy)}
    echo "+ polygraphy $*"
    polygraphy "$@"
    exit $?
fi
if {known}; then
    echo "run_on_device.sh: unknown mode '$MODE' ({modes})" >&2
    exit 2
fi

{FIND_TRTEXEC}{_localize_mode(localize, plugin)}
set -- {_quote(trtexec)}
if [ -n "${{PLUGIN_LIB:-}}" ]; then
    set -- "$@" "{plugin}=$PLUGIN_LIB"
fi
rm -f outputs.json times.json trtexec.rc
echo "+ $TRTEXEC $*"
{{ "$TRTEXEC" "$@" 2>&1; echo $? > trtexec.rc; }} | tee trtexec.log
rc=$(cat trtexec.rc 2>/dev/null || echo 1)
rm -f trtexec.rc
if [ "$rc" -ne 0 ]; then
    echo "run_on_device.sh: trtexec failed (exit $rc); see trtexec.log" >&2
    exit "$rc"
fi
echo "run_on_device.sh: done; copy back outputs.json, times.json and trtexec.log"
"""


def readme(target: str, trt_version: str, model_name: str, int64_note: str,
           has_plugin: bool, localize: bool = False) -> str:
    """README.txt of a bundle: what to run on the device and what to copy back."""
    then_localize = _readme_localize(model_name) if localize else ""
    plugin = ("\nThe graph uses the GELU plugin (CustomGeluPluginDynamic), which ships in\n"
              "libnvinfer_plugin; trtexec loads that library by default.\n" if has_plugin else "")
    return f"""export-gelu device bundle for {target} (TensorRT {trt_version})

On the device (needs only TensorRT's trtexec; Jetson: /usr/src/tensorrt/bin/trtexec):

    sh run_on_device.sh               # or: sh run_on_device.sh polygraphy

It builds model.plan from model.onnx, runs it on the inputs in inputs/ (warm-up, then at
least 100 inferences and 3 s) and writes outputs.json (the outputs) and times.json (the time
of every inference).
{int64_note}{plugin}
Copy back outputs.json, times.json and trtexec.log (verify reads the TensorRT version
from it) into this directory, then:

    export-gelu verify {model_name} --bundle THIS_DIR --device-outputs THIS_DIR/outputs.json \\
        --device-times THIS_DIR/times.json
{then_localize}
Exit 0: every output within tolerance of PyTorch; 1: an output is over tolerance (named);
2: the files do not belong to this bundle (another model, a truncated file, other names or
shapes).

Files: model.onnx (+ external data), inputs/*.bin (raw little-endian, the dtype TensorRT
binds), inputs.json (polygraphy --load-inputs), inputs.npz (the feed as the graph takes it),
reference_outputs.json (PyTorch's outputs, polygraphy format), manifest.json.
"""


def _readme_localize(model_name: str) -> str:
    return f"""
When an output is over tolerance, find where the engine starts to differ: run

    sh run_on_device.sh localize

It runs {MARKED_GRAPH} (model.onnx with each PyTorch module's output marked as an output
too) and writes {MODULE_OUTPUTS}; copy it back, then:

    export-gelu verify {model_name} --bundle THIS_DIR --device-outputs \\
        THIS_DIR/{MODULE_OUTPUTS}
"""
