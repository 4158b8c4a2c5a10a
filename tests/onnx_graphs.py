"""Graphs for the ONNX-pass tests: real GELU spellings exported by both torch exporters,
hand-built graphs (TF erf form, fp16 Cast islands, graph-input GELU, existing GELU ops,
decoys), and helpers to run them in ONNX Runtime and count what a rewrite emitted.
"""

from __future__ import annotations

import copy
import functools
import io
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

E = 16  # feature width of every test graph
SHAPE = [2, 4, E]


# -- torch zoo: each spelling behind its own Linear (no CSE between sites) ------------------

@dataclass(frozen=True)
class Spelling:
    name: str
    kind: str  # exact | tanh | quick
    make: Callable[[], object]  # () -> torch module or function


def _spellings() -> list[Spelling]:
    import torch
    from torch import nn
    from transformers.activations import ACT2FN
    from transformers.models.bloom.modeling_bloom import BloomGelu

    def fn(f: Callable) -> Callable[[], object]:
        return lambda: f

    return [
        Spelling("nn.GELU", "exact", lambda: nn.GELU()),
        Spelling("nn.GELU(tanh)", "tanh", lambda: nn.GELU(approximate="tanh")),
        *[Spelling(f"hf {n}", k, functools.partial(ACT2FN.__getitem__, n)) for n, k in (
            ("gelu_python", "exact"), ("gelu_new", "tanh"), ("gelu_pytorch_tanh", "tanh"),
            ("gelu_accurate", "tanh"), ("gelu_fast", "tanh"), ("quick_gelu", "quick"),
            ("gelu_10", "exact"))],
        Spelling("Bloom", "tanh", lambda: BloomGelu()),
        Spelling("erf, commuted", "exact", fn(
            lambda x: (torch.erf(x * 0.7071067811865476) + 1.0) * x * 0.5)),
        Spelling("tanh, x*x*x", "tanh", fn(
            lambda x: 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x))))),
        Spelling("tanh, distributed (Megatron)", "tanh", fn(
            lambda x: 0.5 * x * (1.0 + torch.tanh(0.7978845608 * x + 0.0356774 * x * x * x)))),
    ]


SPELLING_NAMES = ("nn.GELU", "nn.GELU(tanh)", "hf gelu_python", "hf gelu_new",
                  "hf gelu_pytorch_tanh", "hf gelu_accurate", "hf gelu_fast", "hf quick_gelu",
                  "hf gelu_10", "Bloom", "erf, commuted", "tanh, x*x*x",
                  "tanh, distributed (Megatron)")


def zoo_module():
    """One Linear→activation branch per spelling; output i is spelling i's branch."""
    import torch
    from torch import nn

    spellings = _spellings()
    assert tuple(s.name for s in spellings) == SPELLING_NAMES

    class Zoo(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.ModuleList(nn.Linear(E, E) for _ in spellings)
            acts = [s.make() for s in spellings]
            self.mods = nn.ModuleList(a for a in acts if isinstance(a, nn.Module))
            self.acts = acts

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(act(fc(x)) for fc, act in zip(self.fc, self.acts))

    torch.manual_seed(0)
    return Zoo().eval()


def spelling_kinds() -> dict[str, str]:
    return {s.name: s.kind for s in _spellings()}


EXPORTS = (("dynamo", 18), ("dynamo", 19), ("dynamo", 20), ("torchscript", 13),
           ("torchscript", 17))


@functools.cache
def _exported_bytes(exporter: str, opset: int) -> bytes:
    """The zoo's graph: exported once for every test, worker and session (the session cache,
    tests/session_cache.py: shared), else once per process."""
    from tests.session_cache import shared

    built = shared()
    if built is None:
        return _export_zoo(exporter, opset)
    return built.file(f"zoo-{exporter}{opset}.onnx", lambda path: path.write_bytes(
        _export_zoo(exporter, opset))).read_bytes()


def _export_zoo(exporter: str, opset: int) -> bytes:
    import torch

    from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter

    module = zoo_module()
    x = torch.randn(*SHAPE)
    names = [f"y{i}" for i in range(len(SPELLING_NAMES))]
    with quiet_exporter():
        if exporter == "dynamo":
            proto = torch.onnx.export(module, (x,), dynamo=True, opset_version=opset,
                                      input_names=["x"], output_names=names,
                                      verbose=False).model_proto
            return proto.SerializeToString()
        buf = io.BytesIO()
        torch.onnx.export(module, (x,), buf, dynamo=False, opset_version=opset,
                          input_names=["x"], output_names=names)
        return buf.getvalue()


def exported_zoo(exporter: str, opset: int) -> onnx.ModelProto:
    """The zoo exported by `exporter` at `opset` (a fresh copy each call)."""
    return onnx.load_from_string(_exported_bytes(exporter, opset))


# -- hand-built graphs ------------------------------------------------------------------------

class G:
    """A tiny graph builder: formulas are written as calls, constants as initializers
    (or `Constant` nodes with `const_nodes=True`)."""

    def __init__(self, dtype: int = TensorProto.FLOAT, opset: int = 17,
                 const_nodes: bool = False) -> None:
        self.dtype, self.opset, self.const_nodes = dtype, opset, const_nodes
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.n = 0
        self.domains: dict[str, int] = {}

    def _name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def input(self, name: str = "x", dtype: int | None = None) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, dtype or self.dtype, SHAPE))
        return name

    def c(self, value: float | np.ndarray, dtype: int | None = None) -> str:
        np_dtype = helper.tensor_dtype_to_np_dtype(dtype or self.dtype)
        arr = np.asarray(value, dtype=np_dtype)
        name = self._name("c")
        tensor = numpy_helper.from_array(arr, name)
        if self.const_nodes:
            self.nodes.append(helper.make_node("Constant", [], [name], name=self._name("Const"),
                                               value=tensor))
        else:
            self.inits.append(tensor)
        return name

    def op(self, op: str, *inputs: str, domain: str = "", **attrs: object) -> str:
        out = self._name(f"{op.lower()}_out")
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=self._name(op),
                                           domain=domain, **attrs))
        if domain:
            self.domains[domain] = 1
        return out

    def mul(self, a: str, b: str) -> str:
        return self.op("Mul", a, b)

    def add(self, a: str, b: str) -> str:
        return self.op("Add", a, b)

    def model(self, *outputs: str, out_dtype: int | None = None) -> onnx.ModelProto:
        outs = [helper.make_tensor_value_info(o, out_dtype or self.dtype, SHAPE) for o in outputs]
        graph = helper.make_graph(self.nodes, "g", self.inputs, outs, initializer=self.inits)
        opsets = [helper.make_opsetid("", self.opset)]
        opsets += [helper.make_opsetid(d, v) for d, v in self.domains.items()]
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


# Hand-written formulas: g is the builder, x the input tensor name; each returns the output.

def tf_erf(g: G, x: str) -> str:
    """TF/Keras: 0.5 * x * (1 + erf(x * 0.70710678)), as tf2onnx writes it."""
    t = g.op("Erf", g.mul(x, g.c(0.7071067811865476)))
    return g.mul(g.mul(g.c(0.5), x), g.add(g.c(1.0), t))


def erf_commuted(g: G, x: str) -> str:
    """((erf(x/√2) + 1) * 0.5) * x with every operand order flipped."""
    t = g.op("Erf", g.op("Div", x, g.c(1.4142135623730951)))
    return g.mul(g.mul(g.add(t, g.c(1.0)), g.c(0.5)), x)


def tanh_pow(g: G, x: str) -> str:
    """0.5*x*(1+tanh(0.79788456*(x+0.044715*Pow(x,3)))) with commuted operands."""
    cube = g.op("Pow", x, g.c(3.0))
    inner = g.mul(g.c(0.79788456), g.add(g.mul(cube, g.c(0.044715)), x))
    return g.mul(g.add(g.op("Tanh", inner), g.c(1.0)), g.mul(x, g.c(0.5)))


def tanh_cube(g: G, x: str) -> str:
    """x*x*x cube, constants as written by hand (0.7978845608)."""
    cube = g.mul(x, g.mul(x, x))
    inner = g.mul(g.add(x, g.mul(g.c(0.044715), cube)), g.c(0.7978845608))
    return g.mul(g.c(0.5), g.mul(x, g.add(g.c(1.0), g.op("Tanh", inner))))


def tanh_factored(g: G, x: str) -> str:
    """Megatron/Bloom: x*0.5*(1+tanh(0.79788456*x*(1+0.044715*x*x)))."""
    inner = g.mul(g.mul(g.c(0.79788456), x), g.add(g.c(1.0), g.mul(g.mul(g.c(0.044715), x), x)))
    return g.mul(g.mul(x, g.c(0.5)), g.add(g.c(1.0), g.op("Tanh", inner)))


def quick(g: G, x: str) -> str:
    """QuickGELU x*sigmoid(1.702x), its own kind."""
    return g.mul(x, g.op("Sigmoid", g.mul(g.c(1.702), x)))


HAND_FORMULAS: dict[str, tuple[str, Callable[[G, str], str]]] = {
    "TF erf Mul(0.7071)": ("exact", tf_erf),
    "erf commuted": ("exact", erf_commuted),
    "tanh Pow commuted": ("tanh", tanh_pow),
    "tanh x*x*x": ("tanh", tanh_cube),
    "tanh factored": ("tanh", tanh_factored),
    "QuickGELU": ("quick", quick),
}


def hand_graph(formula: str, *, dtype: int = TensorProto.FLOAT, bias: bool = True,
               const_nodes: bool = False, opset: int = 17) -> onnx.ModelProto:
    """y = formula(MatMul(x, W) + b) (or formula(x) itself with `bias=False`: graph input)."""
    g = G(dtype, opset, const_nodes)
    x = g.input()
    if bias:
        rng = np.random.default_rng(1)
        x = g.add(g.op("MatMul", x, g.c(rng.standard_normal((E, E)) * 0.5)),
                  g.c(rng.standard_normal(E) * 0.5))
    return g.model(HAND_FORMULAS[formula][1](g, x))


def cast_island_graph(formula: str) -> onnx.ModelProto:
    """An fp16 graph whose GELU runs in fp32 between Casts (mixed-precision converters)."""
    g = G(TensorProto.FLOAT)
    x16 = g.input("x", TensorProto.FLOAT16)
    h16 = g.add(x16, g.c(np.full(E, 0.25), TensorProto.FLOAT16))
    x32 = g.op("Cast", h16, to=TensorProto.FLOAT)
    y32 = HAND_FORMULAS[formula][1](g, x32)
    return g.model(g.op("Cast", y32, to=TensorProto.FLOAT16), out_dtype=TensorProto.FLOAT16)


def existing_ops_graph() -> onnx.ModelProto:
    """Every GELU op a graph may already hold: ONNX Gelu (opset 20) and ORT's contrib ops."""
    g = G(opset=20)
    x = g.input()
    b = g.c(np.linspace(-1, 1, E))
    outs = [
        g.op("Gelu", x),
        g.op("Gelu", x, approximate="tanh"),
        g.op("Gelu", x, domain="com.microsoft"),
        g.op("FastGelu", x, b, domain="com.microsoft"),
        g.op("BiasGelu", x, b, domain="com.microsoft"),
        g.op("QuickGelu", x, domain="com.microsoft", alpha=1.702),
    ]
    return g.model(*outs)


EXISTING_KINDS = ["exact", "tanh", "exact", "tanh", "exact", "quick"]


# -- running and counting ------------------------------------------------------------------

def feed(model: onnx.ModelProto, scale: float = 3.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    inits = {t.name for t in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        dtype = helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)
        out[inp.name] = (rng.standard_normal(SHAPE) * scale).astype(dtype)
    return out


def run_ort(model: onnx.ModelProto, inputs: dict[str, np.ndarray],
            optimize: bool = True) -> list[np.ndarray]:
    """Outputs in ORT CPU; `optimize=False` runs the graph exactly as written (no fusions)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def ort_session_ops(model: onnx.ModelProto) -> Counter[str]:
    """Op counts of the graph ORT CPU actually runs (after its online optimizer)."""
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="ort-optimized-") as tmp:
        opts = ort.SessionOptions()
        opts.optimized_model_filepath = f"{tmp}/optimized.onnx"
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return op_counts(onnx.load(opts.optimized_model_filepath))


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max())
               for x, y in zip(a, b))


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    return Counter(f"{n.domain}.{n.op_type}" if n.domain else n.op_type
                   for n in model.graph.node)


def rewrite(model: onnx.ModelProto, target: str, form: str = "keep",
            precision: str = "fp32"):
    """(rewritten copy, sites) for `target`."""
    from export_gelu.passes.onnx import run_onnx_passes
    from export_gelu.targets import PROFILES

    return run_onnx_passes(copy.deepcopy(model), PROFILES[target], form, precision)


def gelu_ref(x: np.ndarray, kind: str) -> np.ndarray:
    """float64 reference GELUs."""
    x = x.astype(np.float64)
    if kind == "exact":
        return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    if kind == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return x / (1 + np.exp(-1.702 * x))


def exporter_shape_graph(shape, *, gelu_is_output: bool = False,  # noqa: ANN001 - ExporterShape
                         const_nodes: bool = False, opset: int = 17) -> onnx.ModelProto:
    """MatMul → one exporter shape (`exporter_shapes.SHAPES` entry) → MatMul, or with the
    GELU's output as the graph output (`gelu_is_output`)."""
    rng = np.random.default_rng(0)
    g = G(opset=opset, const_nodes=const_nodes)
    x = g.op("MatMul", g.input(), g.c(rng.standard_normal((E, E)) * 0.5))
    outs: list[str] = []
    for op, refs in shape.nodes:
        ins = [x if r == "x" else outs[r] if isinstance(r, int) else g.c(r) for r in refs]
        outs.append(g.op(op, *ins))
    if gelu_is_output:
        return g.model(outs[-1])
    return g.model(g.op("MatMul", outs[-1], g.c(rng.standard_normal((E, E)) * 0.5)))
