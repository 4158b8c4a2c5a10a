"""`--output-names A,B,...`: names for a graph's outputs, in order (giving them to the graph is
exporter/onnx_export/output_names.py's)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from export_gelu.errors import BadInputError

_NAME = re.compile(r"^[A-Za-z_][\w.\-/:]*$")


def parse_output_names(text: str | Sequence[str] | None) -> list[str] | None:
    """`--output-names a,b` → ['a', 'b']; None when not given. Refuses empty or repeated names."""
    if text is None:
        return None
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text)]
    if not names or any(not _NAME.match(n) for n in names):
        raise BadInputError(f"--output-names {text!r}: give names separated by commas "
                            "(letters, digits, _ . - / :), e.g. logits,pooler_output")
    if len(set(names)) != len(names):
        raise BadInputError(f"--output-names {text!r}: a name is given twice")
    return names
