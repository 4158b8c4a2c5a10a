"""Which TensorRT versions can be driven from Python here at all (through polygraphy), and
which only on the device (the probe of this machine is check/runners/trt_runner.py:
`local_engine_blocker`).

Engines are built through polygraphy, which drives TensorRT 8.5 and newer only (polygraphy
0.48.0 removed support for older versions; its TrtRunner calls 8.5 APIs unconditionally), and
Python wheels of TensorRT 7.x/8.0 exist only for Pythons older than this package needs.
Older versions are built and checked on the device itself from a bundle (`--bundle DIR`).
"""

from __future__ import annotations

#: The oldest TensorRT the polygraphy releases export-gelu supports can drive.
POLYGRAPHY_MIN_TRT = "8.5"

