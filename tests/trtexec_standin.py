"""A stand-in for TensorRT's trtexec, for tests and docs on machines without TensorRT: it
takes the flags a bundle's run_on_device.sh passes, runs the graph in ONNX Runtime (a GELU
plugin node as its math) on the raw input files, and writes what trtexec writes, in its
formats: `--exportOutput` (6 significant digits, nan/inf bare) and `--exportTimes` (8.2's
layout, warm-up entries first, as trtexec writes them before 8.6).

The device it plays is set by the environment:
- `STANDIN_TIMES_MS="erf=1.0,tanh=0.7"`: the median GPU time per inference of each form
  (the form is the folder name: forms/<form>/model.onnx, outputs/<form>/model.plan);
  samples vary by `STANDIN_JITTER` (default 0.01: ±1%, seeded, so reproducible).
- `STANDIN_NO_PLUGIN=1`: a device without the GELU plugin (a plugin graph does not build).
- `STANDIN_OFFSET="tanh=0.5"`: that form's outputs are off by this much (a kernel bug).

`python -m tests.trtexec_standin --install PATH` writes an executable PATH that runs it
(for `TRTEXEC=PATH sh run_on_device.sh`).
"""

from __future__ import annotations

import json
import math
import os
import sys
import zlib
from pathlib import Path

import numpy as np

PLUGIN_OP = "CustomGeluPluginDynamic"


def _table(name: str) -> dict[str, float]:
    text = os.environ.get(name, "").strip()
    return {k.strip(): float(v) for k, v in (p.split("=", 1) for p in text.split(",") if p)}


def _flags(argv: list[str]) -> dict[str, str]:
    out = {}
    for a in argv:
        if not a.startswith("--"):
            raise SystemExit(f"&&&& FAILED TensorRT.trtexec: bad argument {a}")
        key, _, value = a[2:].partition("=")
        out[key] = value
    return out


def _num(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.6g}"


def write_outputs(outputs: dict[str, np.ndarray], path: Path) -> None:
    """trtexec's --exportOutput layout (sampleReporting.cpp exportJSONOutput)."""
    lines, sep = ["["], "  "
    for name, arr in outputs.items():
        lines.append(f'{sep}{{ "name" : "{name}"')
        sep = ", "
        lines.append(f'  {sep}"dimensions" : "{"x".join(map(str, arr.shape))}"')
        lines.append(f'  {sep}"values" : [ ' + sep.join(_num(v) for v in
                                                        arr.astype(np.float64).ravel().tolist())
                     + " ]")
        lines.append("  }")
    lines.append("]")
    path.write_text("\n".join(lines) + "\n")


def times_entry(clock: float, ms: float) -> str:
    """One inference in --exportTimes' JSON, as trtexec prints it: started at `clock` (ms),
    taking `ms` of GPU compute."""
    return ('{ "startEnqMs" : %g, "endEnqMs" : %g, "startH2dMs" : %g, '
            '"endH2dMs" : %g, "startComputeMs" : %g, "endComputeMs" : %g, '
            '"startD2hMs" : %g, "endD2hMs" : %g, "h2dMs" : 0, "computeMs" : %g, '
            '"d2hMs" : 0, "latencyMs" : %g, "endToEndMs" : %g }'
            % ((clock,) * 5 + (clock + ms,) * 3 + (ms,) * 3))


def write_times(path: Path, median_ms: float, runs: int, warmup_ms: float, seed: str) -> None:
    """--exportTimes as trtexec 8.2 writes it: warm-up entries (starting before `warmup_ms`)
    first, then `runs` timed ones around `median_ms`."""
    rng = np.random.default_rng(zlib.crc32(seed.encode()))
    jitter = float(os.environ.get("STANDIN_JITTER", "0.01"))
    warmups = max(1, int(warmup_ms // max(median_ms, 1e-3)) // 50)
    clock, entries = 0.0, []
    for i in range(warmups + runs):
        if i == warmups:
            clock = max(clock, warmup_ms)
        ms = median_ms * (1.0 + rng.uniform(-jitter, jitter))
        entries.append(times_entry(clock, ms))
        clock += ms
    path.write_text("[\n  " + "\n, ".join(entries) + "\n]\n")


def _feed(session: object, load_inputs: str) -> dict[str, np.ndarray]:
    """The raw --loadInputs files as the graph's inputs (int64 inputs may come as int32)."""
    files = dict(p.split(":", 1) for p in load_inputs.split(",") if p)
    feed = {}
    for inp in session.get_inputs():  # type: ignore[attr-defined]
        shape = [int(d) for d in inp.shape]
        want = np.dtype({"tensor(float)": "float32", "tensor(float16)": "float16",
                         "tensor(int64)": "int64", "tensor(int32)": "int32",
                         "tensor(bool)": "bool"}[inp.type])
        raw = Path(files[inp.name]).read_bytes()
        count = math.prod(shape)
        dtype = want if len(raw) == count * want.itemsize else np.dtype("int32")
        feed[inp.name] = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(
            shape).astype(want)
    return feed


def run(argv: list[str]) -> int:
    from export_gelu.passes.ort_session import make_session

    flags = _flags(argv)
    print("&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec " + " ".join(argv))
    print("[I] TensorRT version: 8.6.1")
    if "onnx" in flags:
        graph = Path(flags["onnx"])
        if os.environ.get("STANDIN_NO_PLUGIN") and PLUGIN_OP in graph.read_bytes().decode(
                "latin-1"):
            print(f"[E] [TRT] ModelImporter.cpp:771: ERROR: getPluginCreator could not find "
                  f"plugin: {PLUGIN_OP} version: 1")
            print("[E] Failed to parse onnx file")
            print("&&&& FAILED TensorRT.trtexec [TensorRT v8601]")
            return 1
        if "saveEngine" in flags:
            Path(flags["saveEngine"]).write_text(json.dumps({"onnx": str(graph.resolve())}))
    else:
        graph = Path(json.loads(Path(flags["loadEngine"]).read_text())["onnx"])
    form = graph.parent.name
    session = make_session(graph)
    outputs = session.run(None, _feed(session, flags["loadInputs"]))
    names = [o.name for o in session.get_outputs()]
    offset = _table("STANDIN_OFFSET").get(form, 0.0)
    if "exportOutput" in flags:
        write_outputs({n: np.asarray(a) + offset for n, a in zip(names, outputs)},
                      Path(flags["exportOutput"]))
    if "exportTimes" in flags:
        median = _table("STANDIN_TIMES_MS").get(form, 1.0)
        write_times(Path(flags["exportTimes"]), median, int(flags.get("iterations", "100")),
                    float(flags.get("warmUp", "200")), f"{form}:{flags['exportTimes']}")
    print("&&&& PASSED TensorRT.trtexec [TensorRT v8601]")
    return 0


def install(path: Path) -> Path:
    """An executable `path` running this stand-in with this interpreter."""
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tests.trtexec_standin "$@"\n')
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    if sys.argv[1:2] == ["--install"]:
        print(install(Path(sys.argv[2])))
        raise SystemExit(0)
    raise SystemExit(run(sys.argv[1:]))
