"""Every node export-gelu writes carries the PyTorch module it came from, under torch's own
metadata keys, whichever exporter ran and through every pass: a 4-block model whose GELUs
are `blocks.K.act` (erf and tanh), exported for each target family, fp16, with dynamic
dims (dynamo, then converted down), through the TorchScript exporter from a module torch.export
cannot capture, from ONNX inputs; the bundled BERT and GPT-2. The graphs still pass
`onnx.checker` and parity, and the exporter's nodes are the ones it writes without it."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

from export_gelu import api
from export_gelu import graph as G
from export_gelu.graph import provenance as P

#: Ops that only a GELU site computes in these models.
GELU_OPS = {"Erf", "Tanh", "Gelu", "FastGelu", "BiasGelu", "Sigmoid"}


class Block(nn.Module):
    def __init__(self, width: int, approximate: str) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.act = nn.GELU(approximate=approximate)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))  # BLOCK_LINE


class Net(nn.Module):
    """Four blocks, exact GELUs in blocks 0 and 2, tanh GELUs in 1 and 3."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(16, "tanh" if k % 2 else "none") for k in range(4)])
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Branchy(nn.Module):
    """`Net` behind a data-dependent branch: torch.export cannot capture it, so the
    TorchScript exporter exports the module itself."""

    def __init__(self) -> None:
        super().__init__()
        self.net = Net()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.net(x)
        return self.net(-x)


def _block_line() -> int:
    lines, start = inspect.getsourcelines(Block.forward)
    return start + next(i for i, line in enumerate(lines) if "BLOCK_LINE" in line)


def _net() -> Net:
    torch.manual_seed(0)
    return Net().eval()


def _x() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(2, 8, 16).abs()


def _share(model: onnx.ModelProto) -> float:
    """The share of non-Constant nodes that record their module."""
    nodes = [n for n in G.all_node_protos(model.graph) if n.op_type != "Constant"]
    return sum(P.has_provenance(n) for n in nodes) / len(nodes)


def _site_nodes(model: onnx.ModelProto, report) -> dict[str, list[onnx.NodeProto]]:
    """Site module → the output graph's nodes of that GELU site."""
    by_name = {n.name: n for n in model.graph.node}
    out = {}
    for site in report.gelu_sites:
        names = site.emitted or site.onnx_nodes
        out[site.module] = [by_name[n] for n in names if n in by_name]
    return out


def _assert_gelus_carry_their_module(model: onnx.ModelProto, report, prefix: str = "") -> None:
    wanted = {f"{prefix}blocks.{k}.act" for k in range(4)}
    sites = _site_nodes(model, report)
    assert set(sites) == wanted
    for module, nodes in sites.items():
        assert nodes and {P.module_of(n) for n in nodes} == {module}
    gelu_nodes = [n for n in model.graph.node if n.op_type in GELU_OPS]
    assert len(gelu_nodes) >= 4
    assert {P.module_of(n) for n in gelu_nodes} == wanted


def _export(tmp_path: Path, target: str, model: nn.Module | None = None, **kw):
    out = tmp_path / f"{target}.onnx"
    report = api.export(model if model is not None else _net(), args=(_x(),), target=target,
                        output=out, **kw)
    assert report.exit_code == 0, report.exit_code
    onnx.checker.check_model(str(out))
    return onnx.load(str(out)), report


@pytest.mark.parametrize("target", ["ort", "trt8.6", "trt8.2", "trt7.0", pytest.param(
    "onnx", marks=pytest.mark.slow)])  # onnx: dynamo as for ort (fast), native Gelu as ort's
def test_every_node_carries_its_module_for_each_target(tmp_path, target):
    model, report = _export(tmp_path, target)  # parity checked: exit 0
    assert _share(model) == 1.0  # the acceptance floor is 95%: every node has it
    _assert_gelus_carry_their_module(model, report)
    # the module's class and the model's own source line, as torch records them
    erf = next(n for n in model.graph.node if n.op_type in {"Erf", "Gelu"})
    assert P.class_of(erf) == "torch.nn.modules.activation.GELU"
    assert P.source_of(erf) == f"{__file__}:{_block_line()}"
    norms = {P.module_of(n) for n in model.graph.node if n.op_type in {"LayerNormalization",
                                                                      "ReduceMean", "Sqrt"}}
    assert norms == {f"blocks.{k}.norm" for k in range(4)}


@pytest.mark.parametrize("target", ["trt8.6", pytest.param("ort", marks=pytest.mark.slow)])
def test_fp16_export_keeps_every_module(tmp_path, target):
    model, report = _export(tmp_path, target, precision="fp16")
    assert _share(model) == 1.0
    _assert_gelus_carry_their_module(model, report)


@pytest.mark.parametrize("form", ["sigmoid", "plugin"])
def test_gelu_forms_carry_the_gelus_module(tmp_path, form):
    """An fx-level change of kind (x·σ(1.702x): new fx nodes) and the TensorRT plugin node."""
    model, report = _export(tmp_path, "trt8.6", gelu=form, verify=form != "plugin")
    assert _share(model) == 1.0
    sites = _site_nodes(model, report)
    assert set(sites) == {f"blocks.{k}.act" for k in range(4)}
    for module, nodes in sites.items():
        assert nodes and {P.module_of(n) for n in nodes} == {module}


@pytest.mark.slow  # the adapters edit through graph.set_nodes, which
# test_nodes_made_while_rewriting_a_node_inherit_its_module pins, fast
def test_dynamic_dims_dynamo_then_converted_down_keeps_every_module(tmp_path):
    model, report = _export(tmp_path, "trt8.2", inputs=["x:batchx8x16:float32"],
                            dynamic=["batch=1:2:4"], verify=False)
    assert report.exporter == "dynamo" and report.opset == 13  # converted down by the fit
    assert _share(model) == 1.0
    _assert_gelus_carry_their_module(model, report)


def test_torchscript_exporter_scopes_become_torchs_keys(tmp_path):
    model, report = _export(tmp_path, "trt8.6", model=Branchy().eval())
    assert report.exporter == "torchscript"
    assert _share(model) == 1.0
    _assert_gelus_carry_their_module(model, report, prefix="net.")
    tanh = next(n for n in model.graph.node if n.op_type == "Tanh")
    assert tanh.name.startswith("/net/blocks.")  # the exporter's own scoped name stays
    assert P.class_of(tanh) == "torch.nn.modules.activation.GELU"
    assert P.scopes_of(tanh)[:2] == ["", "net"]
    assert P.source_of(tanh) == f"{__file__}:{_block_line()}"
    assert not any(n.doc_string for n in model.graph.node)


def test_the_torchscript_export_is_unchanged_but_for_the_metadata():
    """The frames come from the exporter's doc strings, read then cleared: the nodes are
    those the exporter writes without them."""
    import io

    from export_gelu.exporter.onnx_export.to_onnx import export_to_onnx

    module, x = _net(), _x()
    ours, used = export_to_onnx(module, (x,), ["x"], 17, exporter="torchscript")
    assert used == "torchscript"
    buf = io.BytesIO()
    torch.onnx.export(module, (x,), buf, dynamo=False, opset_version=17, input_names=["x"],
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=True)
    plain = onnx.load_from_string(buf.getvalue())
    assert len(ours.graph.node) == len(plain.graph.node)
    for a, b in zip(ours.graph.node, plain.graph.node):
        assert P.has_provenance(a) and not b.metadata_props
        del a.metadata_props[:]
        assert a == b
    assert ours.graph.initializer == plain.graph.initializer


@pytest.fixture(scope="module")
def dynamo18(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("dynamo") / "dynamo18.onnx"
    torch.onnx.export(_net(), (_x(),), dynamo=True, opset_version=18,
                      input_names=["x"]).save(str(src))
    return src


def test_dynamo_graph_converted_down_keeps_every_module(dynamo18):
    """export-gelu's own down-converter (a dynamo export at 18 for a target below it)."""
    from export_gelu.passes.compat.opset.downconvert import downconvert

    model = onnx.load(str(dynamo18))
    assert downconvert(model, 13)
    assert [i.version for i in model.opset_import if i.domain == ""] == [13]
    assert _share(model) == 1.0
    erfs = [n for n in model.graph.node if n.op_type == "Erf"]
    assert [P.module_of(n) for n in erfs] == ["blocks.0.act", "blocks.2.act"]
    norms = [n for n in model.graph.node if n.op_type == "ReduceMean"]  # LayerNorm, expanded
    assert {P.module_of(n) for n in norms} == {f"blocks.{k}.norm" for k in range(4)}


@pytest.mark.slow  # test_version_converter_output_gets_the_metadata_back pins it, fast
def test_onnx_input_converted_up_keeps_torchs_keys(tmp_path, dynamo18):
    """onnx's version converter drops node metadata: it is put back."""
    src = dynamo18
    out = tmp_path / "up.onnx"
    report = api.export(src, target="onnx", output=out, inputs=["x:2x8x16:float32"])
    model = onnx.load(str(out))
    assert report.exit_code == 0 and report.opset == 20
    assert _share(model) == 1.0
    gelus = [n for n in model.graph.node if n.op_type == "Gelu"]
    assert [P.module_of(n) for n in gelus] == [f"blocks.{k}.act" for k in range(4)]


def test_version_converter_output_gets_the_metadata_back():
    from onnx import version_converter

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1)]
    for node, module in zip(nodes, ["act", "head"]):
        node.metadata_props.extend(P.scope_props(["", module], ["M", "C"], (node.name, "op")))
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 11)])
    new = version_converter.convert_version(model, 13)
    assert not any(n.metadata_props for n in new.graph.node)  # what the converter does
    assert P.copy_provenance(model.graph, new.graph) == len(new.graph.node)
    assert [P.module_of(n) for n in new.graph.node] == ["act", "head"]


def test_onnx_input_with_torchscript_names_gets_name_scopes(tmp_path):
    src = tmp_path / "ts.onnx"
    torch.onnx.export(Branchy().eval(), (_x(),), str(src), dynamo=False, opset_version=13,
                      input_names=["x"])
    out = tmp_path / "out.onnx"
    report = api.export(src, target="trt8.2", output=out, inputs=["x:2x8x16:float32"])
    model = onnx.load(str(out))
    assert report.exit_code == 0
    assert _share(model) == 1.0
    assert {s.module for s in report.gelu_sites} == {f"net.blocks.{k}.act" for k in range(4)}
    # names give the scopes only: torch's name_scopes key, no class
    tanh = next(n for n in model.graph.node if n.op_type == "Tanh")
    assert set(P.props_of(tanh)) == {P.NAME_SCOPES} and P.class_of(tanh) is None


def test_nodes_made_while_rewriting_a_node_inherit_its_module():
    """graph.set_nodes: new nodes made without `like=` take the provenance of the node they
    replace (same output), of the node they feed, or of their input's producer."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    pow_node = helper.make_node("Pow", ["x", "two"], ["p"], name="pow")
    pow_node.metadata_props.extend(P.scope_props(["", "norm"], ["M", "LayerNorm"],
                                                 ("pow", "aten.pow.Tensor_Scalar")))
    relu = helper.make_node("Relu", ["p"], ["y"], name="relu")
    relu.metadata_props.extend(P.scope_props(["", "act"], ["M", "ReLU"],
                                             ("relu", "aten.relu.default")))
    two = onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two")
    model = helper.make_model(helper.make_graph([pow_node, relu], "g", [x], [y], [two]),
                              opset_imports=[helper.make_opsetid("", 17)])
    with G.opened(model, write=True) as graph:
        old_pow, old_relu = graph.nodes
        inp: gs.Tensor = old_pow.inputs[0]
        # x*x in place of Pow (same output tensor), via a fresh Identity of x
        ident = G.node(graph, "Identity", [inp])
        square = G.node(graph, "Mul", [ident.outputs[0], ident.outputs[0]],
                        outputs=[old_pow.outputs[0]])
        G.set_nodes(graph, [ident, square, old_relu])
    ident_p, square_p, relu_p = model.graph.node
    assert P.module_of(square_p) == "norm"  # the node it replaced
    assert P.module_of(ident_p) == "norm"  # the node it feeds
    assert P.module_of(relu_p) == "act"  # untouched


@pytest.mark.slow  # the 4-block model above pins the same for every target family, fast
@pytest.mark.parametrize("example", ["bert", "gpt2"])
@pytest.mark.parametrize("target", ["ort", "trt8.6", "trt8.2"])
def test_bundled_examples_carry_their_modules(tmp_path, example, target):
    from examples import models

    torch.manual_seed(0)
    ids = torch.randint(0, models.VOCAB, (2, models.SEQ))
    out = tmp_path / "m.onnx"
    report = api.export(models.build(example), args=(ids,), target=target, output=out)
    model = onnx.load(str(out))
    assert report.exit_code == 0
    onnx.checker.check_model(str(out))
    assert _share(model) >= 0.95
    act = "intermediate.intermediate_act_fn" if example == "bert" else "mlp.act"
    layers = "encoder.layer" if example == "bert" else "h"
    wanted = [f"model.{layers}.{k}.{act}" for k in range(2)]
    sites = _site_nodes(model, report)
    assert sorted(sites) == wanted
    for module, nodes in sites.items():
        assert nodes and {P.module_of(n) for n in nodes} == {module}


def test_inspect_prints_each_sites_module_and_a_nodes(tmp_path):
    import json

    from tests.conftest import run_cli

    model, _ = _export(tmp_path, "trt8.2", verify=False)
    path = tmp_path / "trt8.2.onnx"
    erf = next(n for n in model.graph.node if n.op_type == "Erf")
    line = f"{Path(__file__).name}:{_block_line()}"
    res = run_cli("inspect", path, "--no-dry-run", "--target", "trt8.2", "--node", erf.name)
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines[0].endswith("4 GELU site(s)")
    site_lines = lines[1:5]
    for k, text in enumerate(site_lines):
        assert text.endswith(f"in blocks.{k}.act, {line}")
    assert (f"  node {erf.name}: Erf  in blocks.0.act (torch.nn.modules.activation.GELU), "
            f"{line}") in res.out.splitlines()
    info = json.loads(run_cli("inspect", path, "--no-dry-run", "--json", "--node",
                              erf.name).out)
    assert [s["module"] for s in info["gelu_sites"]] == [f"blocks.{k}.act" for k in range(4)]
    assert {s["where"] for s in info["gelu_sites"]} == {f"{__file__}:{_block_line()}"}
    assert info["nodes"] == [{"name": erf.name, "op_type": "Erf", "module": "blocks.0.act",
                              "class": "torch.nn.modules.activation.GELU",
                              "source": f"{__file__}:{_block_line()}"}]
    bad = run_cli("inspect", path, "--no-dry-run", "--node", "no/such/node")
    assert bad.code == 2 and "no node named 'no/such/node'" in bad.err
    assert len(bad.err.strip().splitlines()) == 1
