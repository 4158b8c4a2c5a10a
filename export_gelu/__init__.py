"""export-gelu: export PyTorch models with every GELU found, lowered per target, and verified."""

from __future__ import annotations

__version__ = "0.1.0"

from export_gelu.api import export, inspect_model  # noqa: E402
from export_gelu.check.verify import verify  # noqa: E402
from export_gelu.errors import BadInputError, ExportGeluError, TargetUnmetError  # noqa: E402
from export_gelu.forms_api import compare_forms  # noqa: E402

__all__ = ["export", "inspect_model", "verify", "compare_forms", "ExportGeluError",
           "BadInputError", "TargetUnmetError", "__version__"]
