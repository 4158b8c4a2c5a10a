"""The record of one GELU site, shared by the fx and ONNX passes and the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

#: Worst-case absolute error a form adds over the whole real line vs exact GELU (docs/gelu.md).
FORM_MAX_ERROR = {"exact": 0.0, "tanh": 4.73e-4, "sigmoid": 2.03e-2}


#: Worst-case absolute difference between two GELU functions over the whole real line
#: (dense float64 sweep of [-20, 20]; beyond it all three agree to < 1e-6). `sigmoid` is
#: x*sigmoid(1.702x), the function a `quick` site computes.
_PAIR_MAX_ERROR = {frozenset(("exact", "tanh")): 4.73e-4,
                   frozenset(("exact", "sigmoid")): 2.03e-2,
                   frozenset(("tanh", "sigmoid")): 2.07e-2}


def function_of(kind_or_form: str) -> str:
    """The function a site kind or `--gelu` form computes: exact, tanh or sigmoid."""
    return {"erf": "exact", "quick": "sigmoid"}.get(kind_or_form, kind_or_form)


def added_max_error(kind: str, form: str) -> float:
    """Worst-case absolute error that turning a `kind` site into `form` adds (0 if same)."""
    a, b = function_of(kind), function_of(form)
    return 0.0 if a == b else _PAIR_MAX_ERROR[frozenset((a, b))]


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
    onnx_nodes: list[str] = field(default_factory=list)  # ONNX nodes that computed it
    emitted: list[str] = field(default_factory=list)  # ONNX nodes written for it
    # a GELU called in a forward: that forward and the line, "Net.forward, model.py:18"
    called_at: str = ""

    @property
    def label(self) -> str:
        """How the report names the site: its module path, else (a GELU written in the
        root model's forward) the forward and line that call it, else the graph's name."""
        return self.module or self.called_at or self.name

    def to_json(self) -> dict[str, object]:
        return asdict(self)
