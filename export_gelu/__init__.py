"""export-gelu: export PyTorch models with every GELU found, lowered per target, and verified."""

from __future__ import annotations

from export_gelu.api import compare_forms, export, inspect_model, verify  # noqa: E402
from export_gelu.errors import BadInputError, ExportGeluError, TargetUnmetError  # noqa: E402
from export_gelu.version import __version__  # noqa: E402

__all__ = ["export", "inspect_model", "verify", "compare_forms", "ExportGeluError",
           "BadInputError", "TargetUnmetError", "__version__"]
