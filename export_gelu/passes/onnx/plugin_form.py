"""`--gelu plugin`: whether a target's parser can create the GELU plugin, and the bias each
plugin node is written with (facts: `export_gelu.trt_parser.plugin`, docs/tensorrt-plugin.md).
"""

from __future__ import annotations

import numpy as np

from export_gelu.errors import TargetUnmetError
from export_gelu.targets import TRT_PROFILES, TargetProfile
from export_gelu.trt_parser.plugin import (
    BIASLESS_CRASH,
    PLUGIN_OP,
    biasless_crashes,
    plugin_support,
    takers_text,
)
from export_gelu.trt_parser.versions import range_text


def plugin_takers() -> str:
    """'trt8.2.3 and trt8.4–trt10': the targets whose parser creates the plugin."""
    return takers_text([(p.name, p.trt_version) for p in TRT_PROFILES])


def plugin_refusal(profile: TargetProfile) -> str | None:
    """Why `--gelu plugin` cannot be used for `profile` (None when it can), with the takers."""
    if profile.runtime != "trt":
        why = f"{profile.name} is not TensorRT"
    else:
        support = plugin_support(profile.trt_version)
        if support.creatable:
            return None
        why = support.reason
    return (f"--gelu plugin: {PLUGIN_OP} is not available on {profile.name} ({why}); "
            f"targets that take it: {plugin_takers()}")


def refuse_plugin_where_unavailable(profile: TargetProfile) -> None:
    """Raise TargetUnmetError (exit 3) when `profile`'s parser cannot create the plugin."""
    why = plugin_refusal(profile)
    if why:
        raise TargetUnmetError(why)


def site_bias(bias: np.ndarray | None, shape: tuple | None, site: str,
              trt_version: str) -> np.ndarray | None:
    """The bias a plugin node for `site` is written with.

    A folded bias Add's values as they are; a site without one gets zeros over its input's
    last axis, so the plugin always runs its bias kernel (its bias-free path divides by
    zero on some versions). When that axis size is unknown, a bias-free node is written
    where the version runs it, and the site is refused (exit 3) where it would crash.
    """
    if bias is not None:
        return np.asarray(bias).reshape(-1)
    last = shape[-1] if shape else None
    if isinstance(last, int) and last > 0:
        return np.zeros(last, dtype=np.float32)
    if trt_version and biasless_crashes(trt_version):
        raise TargetUnmetError(
            f"--gelu plugin: GELU site {site}: its input's last-axis size is unknown, so no "
            f"zero bias can be written, and a {PLUGIN_OP} node without a bias divides by "
            f"zero in TensorRT {range_text(*BIASLESS_CRASH)} (trt{trt_version} is among "
            "them); give the model static shapes, or use another --gelu form")
    return None
