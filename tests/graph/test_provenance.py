"""Provenance (`export_gelu.graph.provenance`): the module, class and source line a node came
from, read from torch's own metadata keys on a real dynamo export, from a TorchScript
exporter's node names, and written back in torch's format."""

from __future__ import annotations

import inspect

import onnx
import pytest
import torch
from torch import nn

from export_gelu import graph as G
from export_gelu.graph import provenance as P


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fc(x))  # GELU_LINE


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(8) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x * 2


def _gelu_line() -> int:
    lines, start = inspect.getsourcelines(Block.forward)
    return start + next(i for i, line in enumerate(lines) if "GELU_LINE" in line)


@pytest.fixture(scope="module")
def dynamo_model() -> onnx.ModelProto:
    torch.manual_seed(0)
    program = torch.onnx.export(Net().eval(), (torch.randn(2, 8),), dynamo=True,
                                opset_version=18, verbose=False)
    return program.model_proto


def _by_op(model: onnx.ModelProto, op: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == op]


def test_reads_the_module_class_and_source_line_torch_recorded(dynamo_model):
    erfs = _by_op(dynamo_model, "Erf")
    assert [P.module_of(n) for n in erfs] == ["blocks.0.act", "blocks.1.act"]
    assert {P.class_of(n) for n in erfs} == {"torch.nn.modules.activation.GELU"}
    assert P.scopes_of(erfs[1]) == ["", "blocks.1", "blocks.1.act"]
    # the model's own line, not torch's F.gelu inside nn.GELU.forward
    assert {P.source_of(n) for n in erfs} == {f"{__file__}:{_gelu_line()}"}
    assert all(P.has_provenance(n) for n in dynamo_model.graph.node)
    # the final `x * 2` belongs to the model itself
    (mul,) = [n for n in _by_op(dynamo_model, "Mul") if P.module_of(n) == ""]
    assert P.class_of(mul) == f"{__name__}.Net"


def test_same_answers_on_the_graphsurgeon_graph(dynamo_model):
    with G.opened(dynamo_model) as graph:
        erfs = [n for n in graph.nodes if n.op == "Erf"]
        assert [P.module_of(n) for n in erfs] == ["blocks.0.act", "blocks.1.act"]
        assert P.source_of(erfs[0]) == f"{__file__}:{_gelu_line()}"


def test_written_props_read_back_as_torch_writes_them(dynamo_model):
    erf = _by_op(dynamo_model, "Erf")[0]
    torch_props = P.props_of(erf)
    node = onnx.helper.make_node("Erf", ["a"], ["b"], name="e")
    node.metadata_props.extend(P.scope_props(
        P.scopes_of(erf), ["__main__.Net", f"{__name__}.Block",
                           "torch.nn.modules.activation.GELU"],
        ("gelu", "aten.gelu.default"), torch_props[P.STACK_TRACE]))
    mine = P.props_of(node)
    assert mine[P.NAME_SCOPES] == torch_props[P.NAME_SCOPES]
    assert mine[P.NAMESPACE].split("/")[1:] == torch_props[P.NAMESPACE].split("/")[1:]
    assert P.module_of(node) == "blocks.0.act"
    assert P.source_of(node) == P.source_of(erf)


@pytest.mark.parametrize(("name", "module"), [
    ("/blocks.2/act/Tanh", "blocks.2.act"),  # TorchScript exporter, a ModuleList item
    ("/encoder/layer.0/intermediate/act/Mul_1", "encoder.layer.0.intermediate.act"),
    ("/layers/layers.0/layers.0.1/Add", "layers.0.1"),  # a list inside a list
    ("/blocks.2/act/Mul_7/Mul", "blocks.2.act"),  # export-gelu's `<base>/<Op>` on such a name
    ("/Mul_7/Mul", None),  # an op of the model itself, rewritten by export-gelu
    ("/Add_3", None),
    ("node_gelu", None),  # a dynamo name without its metadata: nothing to read
])
def test_torchscript_node_names_give_the_module(name, module):
    assert P.module_of(onnx.helper.make_node("Mul", ["a"], ["b"], name=name)) == module


def test_no_metadata_no_answer():
    node = onnx.helper.make_node("Relu", ["a"], ["b"], name="relu")
    assert (P.module_of(node), P.class_of(node), P.source_of(node)) == (None, None, None)
    assert not P.has_provenance(node)
    # an fx node with no module stack: torch writes only its own name
    node.metadata_props.add(key=P.NAME_SCOPES, value="['add']")
    assert P.module_of(node) is None


def test_frames_inside_torch_or_generated_code_are_not_the_source():
    torch_file = inspect.getsourcefile(nn.Linear)
    trace = (f'File "/proj/model.py", line 12, in forward\n    x = self.fc(x)\n'
             f'  File "{torch_file}", line 134, in forward\n    return F.linear(x)\n'
             '  File "<eval_with_key>.3", line 9, in forward')
    node = onnx.helper.make_node("MatMul", ["a", "w"], ["b"], name="m")
    node.metadata_props.add(key=P.STACK_TRACE, value=trace)
    assert P.source_of(node) == "/proj/model.py:12"
    assert P.frames(trace)[0] == ("/proj/model.py", 12)


def test_unreadable_or_huge_values_read_as_nothing():
    node = onnx.helper.make_node("Relu", ["a"], ["b"], name="relu")
    node.metadata_props.add(key=P.NAME_SCOPES, value="[" * 5000)
    assert P.module_of(node) is None
    node.metadata_props[0].value = repr(["", "x" * P.MAX_VALUE_CHARS, "relu"])
    assert P.module_of(node) is None
