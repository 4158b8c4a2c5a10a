"""Where TensorRT's `CustomGeluPluginDynamic` can be created from an ONNX node.

Read from the sources (provenance in docs/tensorrt.md):
- 7.0: the ONNX parser has no fallback from an unknown op to a plugin creator
  (onnx/onnx-tensorrt 84b5be1, ModelImporter.cpp: "No importer registered for op").
- 7.1 to 8.2.2: the fallback passes only the fields a creator declares, and the GELU
  creator declares none (NVIDIA/TensorRT release/7.1 … release/8.2 plugin/geluPlugin/
  geluPlugin.cpp, creator constructor), so `type_id` never arrives: "GeluPluginDynamicCreator:
  invalid typeId -1". Fields were added by "Initialize attributes of geluPlugin", shipped
  in 8.2.3.
- 8.2.3 to 10.x: creatable; deprecated from 9.0. From 8.6 to 10.12 a node without `bias`
  divides by zero in the kernel (fixed in 10.13), so export-gelu always writes one.
- 11.0: removed ("Removed deprecated plugins", TensorRT CHANGELOG 11.0).
"""

from __future__ import annotations

from dataclasses import dataclass

from export_gelu.trt_parser.versions import in_range

PLUGIN_OP = "CustomGeluPluginDynamic"
PLUGIN_VERSION = "1"
PLUGIN_NAMESPACE = ""

#: First version whose creator can be built from an ONNX node, and the first without it.
CREATABLE_SINCE = "8.2.3"
REMOVED_IN = "11.0"
DEPRECATED_SINCE = "9.0"
BIASLESS_CRASH = ("8.6", "10.13")  # since, fixed_in


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
