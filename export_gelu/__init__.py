"""export-gelu: export PyTorch models with every GELU found, lowered per target, and verified.

The package imports nothing heavy by itself: `export`, `inspect_model`, `verify` and
`compare_forms` (and torch, onnx with them) are imported on first use, so the command line
starts (and `--help`, `--version` answer) without loading torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from export_gelu.errors import BadInputError, ExportGeluError, TargetUnmetError
from export_gelu.version import __version__

#: Public names defined in submodules, imported when first asked for.
_LAZY = {"export": "export_gelu.api", "inspect_model": "export_gelu.api",
         "verify": "export_gelu.api", "compare_forms": "export_gelu.api"}

__all__ = ["export", "inspect_model", "verify", "compare_forms", "ExportGeluError",
           "BadInputError", "TargetUnmetError", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'export_gelu' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
