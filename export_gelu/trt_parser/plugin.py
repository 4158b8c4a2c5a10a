"""Where TensorRT's `CustomGeluPluginDynamic` can be created from an ONNX node, and how it
reads its attributes.

Read from the sources (provenance in docs/tensorrt-plugin.md):
- 7.0: the ONNX parser has no fallback from an unknown op to a plugin creator
  (onnx/onnx-tensorrt 84b5be1, ModelImporter.cpp: "No importer registered for op").
- 7.1 to 8.2.2: the fallback passes only the fields a creator declares, and the GELU
  creator declares none (NVIDIA/TensorRT release/7.1, 7.2, 8.0 plugin/geluPlugin/
  geluPlugin.cpp, creator constructor), so `type_id` never arrives: "GeluPluginDynamicCreator:
  invalid typeId -1". Fields were added by "Initialize attributes of geluPlugin" (e212c904;
  on release/8.2 as e915b906, after the 8.2.2.1 update and before "Update TRT version to
  8.2.3.0").
- 8.2.3 to 10.x: creatable; deprecated from 9.0. From 8.6 to 10.12 a node without `bias`
  divides by zero in the kernel (fixed in 10.13), so export-gelu always writes one.
- 11.0: removed ("Removed deprecated plugins", TensorRT CHANGELOG 11.0).

The creator is registered by REGISTER_TENSORRT_PLUGIN, i.e. in the empty namespace, as name
"CustomGeluPluginDynamic" version "1" (geluPlugin.cpp, every release 7.0 … 10.16). The
parser hands a TENSOR attribute over as its raw bytes (onnx-tensorrt loadFields/copyField),
and the plugin copies `count · sizeof(type)` bytes of them as its own type (`type_id` 0
float32, 1 float16; its kernels run no other type): `bias_as_read` is that reading.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from export_gelu.trt_parser.versions import in_range, version_key

PLUGIN_OP = "CustomGeluPluginDynamic"
PLUGIN_VERSION = "1"
PLUGIN_NAMESPACE = ""

#: First version whose creator can be built from an ONNX node, and the first without it.
CREATABLE_SINCE = "8.2.3"
REMOVED_IN = "11.0"
DEPRECATED_SINCE = "9.0"
BIASLESS_CRASH = ("8.6", "10.13")  # since, fixed_in
#: `type_id` (nvinfer1::DataType) → the element type the plugin computes and reads its bias in.
TYPE_IDS: dict[int, type] = {0: np.float32, 1: np.float16}


@dataclass(frozen=True)
class PluginSupport:
    """The GELU plugin on one TensorRT version."""

    status: str  # unmappable | no_fields | yes | deprecated | removed
    reason: str  # why not, in words, empty when creatable

    @property
    def creatable(self) -> bool:
        return self.status in ("yes", "deprecated")


def plugin_support(version: str) -> PluginSupport:
    """What the parser of TensorRT `version` does with a `CustomGeluPluginDynamic` node."""
    if in_range(version, fixed_in="7.1"):
        return PluginSupport("unmappable", "the TensorRT 7.0 ONNX parser cannot map an unknown "
                                           "op to a plugin")
    if in_range(version, fixed_in=CREATABLE_SINCE):
        return PluginSupport("no_fields", "the GELU plugin creator declares no fields before "
                                          "8.2.3, so the parser cannot pass type_id/bias "
                                          "(\"GeluPluginDynamicCreator: invalid typeId -1\")")
    if in_range(version, fixed_in=DEPRECATED_SINCE):
        return PluginSupport("yes", "")
    if in_range(version, fixed_in=REMOVED_IN):
        return PluginSupport("deprecated", "")
    return PluginSupport("removed", "TensorRT 11 removed the GELU plugin")


def biasless_crashes(version: str) -> bool:
    """Whether a plugin node without `bias` divides by zero on this version."""
    return in_range(version, *BIASLESS_CRASH)


def takers_text(profile_versions: list[tuple[str, str]]) -> str:
    """The targets that take the plugin, e.g. 'trt8.2.3 and trt8.4–trt10'.

    `profile_versions`: (target name, TensorRT version it stands for), oldest first. A first
    creatable release that no target stands for exactly is named as trtX.Y.Z before them.
    """
    names = [n for n, v in profile_versions if plugin_support(v).creatable]
    runs: list[list[str]] = []
    last = None
    for i, (name, _v) in enumerate(profile_versions):
        if name in names:
            if last is not None and last == i - 1:
                runs[-1].append(name)
            else:
                runs.append([name])
            last = i
    text = [r[0] if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs]
    if not any(version_key(v) == version_key(CREATABLE_SINCE) for _n, v in profile_versions):
        text.insert(0, f"trt{CREATABLE_SINCE}")
    return " and ".join(text) if len(text) <= 2 else ", ".join(text)


def bias_as_read(stored: np.ndarray, type_id: int) -> np.ndarray:
    """The bias values a plugin of `type_id` computes with, from the tensor the node holds.

    The plugin takes the first `count · sizeof(type)` bytes of the attribute's data as its
    own type, whatever type the tensor declares: float32 data under `type_id` 1 is read as
    float16 halves of its bytes. Raises ValueError where the plugin would read past the data
    or cannot run the type.
    """
    if type_id not in TYPE_IDS:
        raise ValueError(f"type_id {type_id}: the plugin runs float32 (0) and float16 (1) only")
    dtype = np.dtype(TYPE_IDS[type_id])
    raw = np.ascontiguousarray(stored).reshape(-1)
    need = raw.size * dtype.itemsize
    data = raw.astype(raw.dtype.newbyteorder("<")).tobytes()
    if len(data) < need:
        raise ValueError(f"its bias holds {raw.dtype} data and type_id {type_id} reads "
                         f"{dtype.name}: the plugin would read {need} bytes of a "
                         f"{len(data)}-byte tensor")
    return np.frombuffer(data[:need], dtype=dtype.newbyteorder("<")).astype(dtype)
