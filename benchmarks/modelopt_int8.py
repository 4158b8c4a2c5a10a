"""NVIDIA Model Optimizer's ONNX INT8 PTQ, run with the Python of its own venv (it pulls
onnxruntime-gpu, CUDA packages and its own onnx, so it never shares export-gelu's):

    /tmp/modelopt-venv/bin/python benchmarks/modelopt_int8.py IN.onnx OUT.onnx CALIB.npz

CALIB.npz holds the calibration inputs, each array stacked on a leading feed axis. It runs
`modelopt.onnx.quantization.quantize` with its defaults for INT8 except: calibration on the
CPU provider (no GPU here) and the high-precision type kept fp32 (its default, fp16, would
make the comparison one of fp16 vs fp32 on a CPU). Prints one line of JSON: what it did.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    src, dst, calib = argv
    import numpy as np
    from modelopt.onnx.quantization import quantize

    data = dict(np.load(calib))
    start = time.perf_counter()
    quantize(src, quantize_mode="int8", calibration_data=data, calibration_eps=["cpu"],
             high_precision_dtype="fp32", output_path=dst, log_level="ERROR")
    import modelopt

    print(json.dumps({"seconds": time.perf_counter() - start,
                      "version": getattr(modelopt, "__version__", "?")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
