"""What the TensorRT ONNX parser of each version accepts, as data read from its own sources.

`versions` compares TensorRT version strings, `plugin` says where the GELU plugin can be
created from an ONNX node, `capability` whether this installation can build an engine for a
version or only the device can. The per-op tables and the restriction records live beside
them (their detectors read the one graph of `export_gelu.graph`; the fixes for them are
behaviour, in `export_gelu.passes.compat`); `export_gelu.targets` builds the target profiles
from this data.
"""
