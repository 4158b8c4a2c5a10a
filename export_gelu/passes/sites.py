"""The record of one GELU site, shared by the fx and ONNX passes and the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass

KINDS = ("exact", "tanh", "quick")

#: Worst-case absolute error a form adds over the whole real line vs exact GELU (KNOWLEDGE §1).
FORM_MAX_ERROR = {"exact": 0.0, "tanh": 4.73e-4, "sigmoid": 2.03e-2}


@dataclass
class GeluSite:
    """One GELU found in a graph: where, what it was, and what was done to it."""

    name: str
    kind: str  # exact | tanh | quick
    source: str  # how it was written: "nn.GELU", "gelu_new formula", "onnx Gelu", ...
    action: str = "kept"
    module: str = ""  # module path from nn_module_stack, "" when unknown
    level: str = "fx"  # fx | onnx
    added_max_error: float = 0.0  # worst-case abs error the action adds over the source math

    def to_json(self) -> dict[str, object]:
        return asdict(self)
