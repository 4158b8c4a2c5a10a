"""The first divergence: one node of block K corrupted (a GELU's tanh argument ×1.25, a
LayerNorm scale ×1.1, noise on one Linear weight) in graphs from export-gelu and from torch's
two exporters; `verify` names `blocks.K` — the module, a node of it and the model's source
line — in the report and the printed line. Where no module maps, the graph is compared with
itself in a wider precision node by node (an fp16 overflow is named)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
import torch
from torch import nn

from export_gelu import graph as G
from export_gelu.graph.provenance import module_of
from tests.conftest import run_cli
from tests.report_schema import validate_report

K = 2  # the corrupted block
BLOCKS = 4
NOISE = 0.05


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc = nn.Linear(d, d)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fc(self.norm(x)))  # BLOCK LINE


class Net(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.inp = nn.Linear(8, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(BLOCKS))
        self.head = nn.Linear(d, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def block_line() -> str:
    """`test_divergence.py:N`: the line of Block.forward that calls the block's modules."""
    lines, start = inspect.getsourcelines(Block.forward)
    offset = next(i for i, text in enumerate(lines) if "# BLOCK LINE" in text)
    return f"{__file__}:{start + offset}"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The model once (.pt2), and its graphs: export-gelu's for ort, trt8.6 and trt8.2, torch's
    dynamo exporter at opset 18 and the TorchScript exporter at opset 17."""
    d = tmp_path_factory.mktemp("diverge")
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(2, 5, 8)
    out = {"pt2": d / "net.pt2"}
    torch.export.save(torch.export.export(model, (x,)), str(out["pt2"]))
    out["dynamo18"] = d / "dynamo18.onnx"
    torch.onnx.export(model, (x,), str(out["dynamo18"]), dynamo=True, opset_version=18)
    out["torchscript17"] = d / "ts17.onnx"
    torch.onnx.export(model, (x,), str(out["torchscript17"]), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    del model
    return out


def exported(files: dict[str, Path], source: str) -> Path:
    """The graph of `source`: a torch exporter's, or export-gelu's for a target (made once)."""
    if source in files:
        return files[source]
    path = files["pt2"].parent / f"eg_{source}.onnx"
    checks = (("--localize", "--report", path.with_suffix(".json"), "--iterations", "1")
              if source == "ort" else ("--no-verify",))
    res = run_cli(files["pt2"], "--target", source, "-o", path, *checks)
    assert res.code == 0, res.err
    files[source] = path
    return path


def test_export_localizes_on_request(files):
    """export --localize: the written graph's modules against PyTorch's, all inside."""
    parity = json.loads(exported(files, "ort").with_suffix(".json").read_text())["parity"]
    assert parity["status"] == "passed" and parity["first_divergence"] is None
    assert parity["localized_by"] == "modules"
    assert {e["module"] for e in parity["module_errors"]} >= {f"blocks.{i}.act"
                                                             for i in range(BLOCKS)}


def _values(tensor: gs.Tensor) -> np.ndarray:
    """A weight's values, through the Identity / Constant nodes an exporter puts before it."""
    while not isinstance(tensor, gs.Constant):
        node = tensor.inputs[0]
        if node.op == "Constant":
            return np.asarray(node.attrs["value"].values)
        tensor = node.inputs[0]
    return np.asarray(tensor.values)


def corrupt(src: Path, dst: Path, how: str, k: int = K) -> str:
    """`src` with one node of block `k` changed (found by order: the k-th of its kind), saved
    with export-gelu's graph helpers so node metadata stays; the changed node's name."""
    model = onnx.load(str(src))
    with G.opened(model, write=True) as graph:
        if how == "gelu":  # the GELU's constant inside tanh ×1.25: its tanh argument scaled
            node = [n for n in graph.nodes if n.op == "Tanh"][k]
            scale = G.constant(graph, np.array(1.25, np.float32), "bad_scale")
            mul = G.node(graph, "Mul", [node.inputs[0], scale], like=node)
            G.set_input(node, 0, mul.outputs[0])
            at = next(i for i, n in enumerate(graph.nodes) if n is node)
            G.set_nodes(graph, [*graph.nodes[:at], mul, *graph.nodes[at:]])
        elif how == "layernorm":  # the LayerNorm scale ×1.1
            node = [n for n in graph.nodes if n.op == "LayerNormalization"][k]
            gamma = _values(node.inputs[1]) * np.float32(1.1)
            G.set_input(node, 1, G.constant(graph, gamma.astype(np.float32), "bad_gamma"))
        else:  # noise on the block's Linear weight (MatMul 0 is the input layer)
            node = [n for n in graph.nodes if n.op in ("MatMul", "Gemm")][k + 1]
            w = _values(node.inputs[1])
            noise = np.random.default_rng(0).normal(0, NOISE, w.shape)
            G.set_input(node, 1, G.constant(graph, (w + noise).astype(np.float32), "bad_w"))
        name = node.name
    onnx.save(model, str(dst))
    return name


def has_provenance(path: Path) -> bool:
    with G.opened(onnx.load(str(path), load_external_data=False)) as graph:
        return any((module_of(n) or "").startswith("blocks.") for n in graph.nodes)


EXPECTED_MODULE = {"gelu": f"blocks.{K}.act", "layernorm": f"blocks.{K}.norm",
                   "weight": f"blocks.{K}.fc"}
CASES = [("ort", "layernorm"), ("ort", "weight"),
         ("trt8.6", "gelu"), ("trt8.6", "layernorm"),
         ("trt8.2", "gelu"), ("trt8.2", "weight"),
         ("dynamo18", "gelu"), ("dynamo18", "layernorm"), ("dynamo18", "weight"),
         ("torchscript17", "gelu"), ("torchscript17", "layernorm"),
         ("torchscript17", "weight")]


@pytest.mark.parametrize(("source", "how"), CASES)
def test_verify_names_block_k(files, tmp_path, source, how):
    graph = exported(files, source)
    assert has_provenance(graph), f"{source}: no node of the graph names its module"
    bad = tmp_path / "bad.onnx"
    corrupt(graph, bad, how)
    report = tmp_path / "r.json"
    res = run_cli("verify", files["pt2"], bad, "--report", report, "--iterations", "1",
                  "--warmup", "0", "--no-calibration")
    assert res.code == 1, res.err
    data = json.loads(report.read_text())
    validate_report(data)
    parity = data["parity"]
    first = parity["first_divergence"]
    assert first["torch_module"] == EXPECTED_MODULE[how], parity["module_errors"]
    assert first["source"].endswith(block_line())  # file:LINE, the path as recorded
    assert first["max_abs"] > first["atol"] == parity["atol"]
    with G.opened(onnx.load(str(bad), load_external_data=False)) as g:
        node = next(n for n in g.nodes if n.name == first["node"])
        assert node.op == first["op_type"] and first["tensor"] in [t.name for t in node.outputs]
        assert (module_of(node) or "") == first["torch_module"]
    # every module before it is inside, and every module of the blocks before K was compared
    errors = parity["module_errors"]
    at = next(i for i, e in enumerate(errors) if e["module"] == first["torch_module"])
    assert all(e["passed"] for e in errors[:at]) and not errors[at]["passed"]
    assert {f"blocks.{i}" for i in range(K)} <= {e["module"] for e in errors[:at]}
    line = next(ln for ln in res.out.splitlines() if ln.startswith("first divergence:"))
    assert line.startswith(f"first divergence: {EXPECTED_MODULE[how]} — {first['op_type']} "
                           f"{first['node']}, max abs ")
    assert line.endswith(f"> {first['atol']:g}, {Path(block_line()).name}")


def test_a_passing_run_localizes_only_on_request(files, tmp_path):
    graph = exported(files, "dynamo18")
    report = tmp_path / "r.json"
    args = ("verify", files["pt2"], graph, "--report", report, "--iterations", "1",
            "--warmup", "0", "--no-calibration")
    res = run_cli(*args)
    assert res.code == 0, res.err
    assert "first_divergence" not in json.loads(report.read_text())["parity"]
    assert "first divergence" not in res.out
    res = run_cli(*args, "--localize")
    assert res.code == 0, res.err
    parity = json.loads(report.read_text())["parity"]
    assert parity["first_divergence"] is None and parity["localized_by"] == "modules"
    modules = [e["module"] for e in parity["module_errors"]]
    assert len(modules) == 3 * BLOCKS + BLOCKS + 2  # norm, fc, act per block, blocks, inp, head
    assert modules.index("blocks.0.act") < modules.index("blocks.0") < modules.index("blocks.1")
    assert all(e["passed"] and e["max_abs"] < 1e-5 for e in parity["module_errors"])
    assert f"first divergence: none ({len(modules)} module outputs within tolerance)" in res.out


def test_localize_needs_parity(files, tmp_path):
    res = run_cli(files["pt2"], "--target", "ort", "-o", tmp_path / "o.onnx", "--no-verify",
                  "--localize")
    assert res.code == 2
    assert "--localize compares the graph with PyTorch: drop --no-verify" in res.err
    assert not (tmp_path / "o.onnx").exists()


def fp16_overflow_graph(path: Path) -> None:
    """y = tanh(1e-5·(10x)³) in fp16: (10x)³ overflows fp16 (65504) for x ≥ 4.1."""
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [h.make_node("Mul", ["x", "ten"], ["s"], name="scale"),
             h.make_node("Pow", ["s", "three"], ["c"], name="cube"),
             h.make_node("Mul", ["c", "small"], ["t"], name="shrink"),
             h.make_node("Tanh", ["t"], ["y"], name="squash")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT16, [4])],
                         [h.make_tensor_value_info("y", T.FLOAT16, [4])],
                         [h.make_tensor("ten", T.FLOAT16, [], [10.0]),
                          h.make_tensor("three", T.FLOAT16, [], [3.0]),
                          h.make_tensor("small", T.FLOAT16, [], [1e-5])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))


def test_without_modules_the_graph_is_compared_node_by_node(tmp_path):
    from export_gelu.check.localize.node_divergence import localize_nodes
    from export_gelu.tolerances import resolve_tolerances

    path = tmp_path / "f16.onnx"
    fp16_overflow_graph(path)
    tol = resolve_tolerances("fp16")
    loc = localize_nodes(path, {"x": np.array([1, 2, 5, 6], np.float16)}, tol)
    assert loc.method == "nodes"
    assert (loc.first.node, loc.first.op_type, loc.first.tensor) == ("cube", "Pow", "c")
    assert loc.first.max_abs == float("inf") and loc.first.atol == tol.atol
    assert [e.module for e in loc.modules] == ["scale", "cube", "shrink", "squash"]
    assert loc.modules[0].passed and not loc.modules[1].passed
    assert loc.line().startswith("first divergence: (no module) — Pow cube, max abs inf > 0.02")
    # small inputs stay in fp16's range: nothing diverges
    quiet = localize_nodes(path, {"x": np.array([0.1, 0.2, 0.3, 0.4], np.float16)}, tol)
    assert quiet.first is None and all(e.passed for e in quiet.modules)


def test_a_device_bundle_localizes_from_the_module_outputs_it_hands_back(files, tmp_path):
    """ONNX Runtime stands in for the device, as in test_bundle.py: it runs the bundle's
    marked graph (`run_on_device.sh localize`) and its outputs come back in trtexec's form."""
    import onnxruntime as ort

    from export_gelu.device.script import check_flags
    from tests.device.test_bundle import bundle_feed, write_trtexec_outputs

    bad, bundle = tmp_path / "bad.onnx", tmp_path / "bundle"
    corrupt(exported(files, "dynamo18"), bad, "layernorm")
    res = run_cli("verify", files["pt2"], bad, "--target", "trt8.6", "--bundle", bundle,
                  "--iterations", "1", "--warmup", "0", "--no-calibration")
    assert res.code == 1, res.err
    manifest = json.loads((bundle / "manifest.json").read_text())
    marked = manifest["localize"]["outputs"]
    assert manifest["localize"]["graph"] == "model_marked.onnx" and len(marked) >= 4 * BLOCKS
    assert "model_marked.onnx" in manifest["files"]
    check_flags(manifest["localize"]["trtexec"], "8.6")  # flags TensorRT 8.6's trtexec parses
    assert "--onnx=model_marked.onnx" in manifest["localize"]["trtexec"]
    assert manifest["localize"]["polygraphy"][-len(marked) - 1:] == ["--trt-outputs", *marked]
    script = (bundle / "run_on_device.sh").read_text()
    assert 'if [ "$MODE" = localize ]' in script and "--exportOutput=module_outputs.json" in script
    assert "sh run_on_device.sh localize" in (bundle / "README.txt").read_text()

    sess = ort.InferenceSession(str(bundle / "model_marked.onnx"),
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    assert names[1:] == marked
    write_trtexec_outputs(dict(zip(names, sess.run(None, bundle_feed(bundle)))),
                          bundle / "module_outputs.json")
    report = tmp_path / "r.json"
    res = run_cli("verify", files["pt2"], "--bundle", bundle, "--device-outputs",
                  bundle / "module_outputs.json", "--report", report)
    assert res.code == 1, res.err
    parity = json.loads(report.read_text())["parity"]
    assert list(parity["outputs"]) == names[:1]  # judged on the graph's output only
    first = parity["first_divergence"]
    assert first["torch_module"] == f"blocks.{K}.norm" and first["source"].endswith(block_line())
    assert f"first divergence: blocks.{K}.norm — LayerNormalization" in res.out

    # the plain run's outputs.json carries no module tensors: said, not guessed
    plain = {n: v for n, v in zip(names, sess.run(None, bundle_feed(bundle))) if n not in marked}
    write_trtexec_outputs(plain, bundle / "outputs.json")
    res = run_cli("verify", files["pt2"], "--bundle", bundle, "--device-outputs",
                  bundle / "outputs.json")
    assert res.code == 1
    assert "first divergence: none found (the device's outputs hold no module-boundary " \
           "tensor: run `sh run_on_device.sh localize`" in res.out


@pytest.mark.slow  # matplotlib's plots; the localization itself: test_verify_names_block_k
def test_markdown_report_plots_error_against_depth(files, tmp_path):
    bad, md = tmp_path / "bad.onnx", tmp_path / "r.md"
    corrupt(exported(files, "torchscript17"), bad, "gelu")
    res = run_cli("verify", files["pt2"], bad, "--report-md", md, "--iterations", "1",
                  "--warmup", "0", "--no-calibration")
    assert res.code == 1, res.err
    text = md.read_text()
    line = next(ln for ln in res.out.splitlines() if ln.startswith("first divergence:"))
    assert f"## First divergence\n\n`{line}`" in text
    assert f"| `blocks.{K}.act` |" in text and "**FAIL**" in text
    png = tmp_path / "r.error-by-depth.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert "![Error against depth: where the graph starts to differ](r.error-by-depth.png)" \
        in text


def test_a_pickled_module_is_localized_through_forward_hooks(files, tmp_path):
    """An nn.Module (not a program): its submodules' forward hooks record their outputs, and
    the source line is the call site the hook sees."""
    torch.manual_seed(0)
    pickled = tmp_path / "net.pkl"
    torch.save(Net().eval(), str(pickled))  # the same weights as the .pt2 (seed 0)
    bad = tmp_path / "bad.onnx"
    corrupt(exported(files, "torchscript17"), bad, "weight")
    report = tmp_path / "r.json"
    res = run_cli("verify", pickled, bad, "--allow-pickle", "--input", "x:2x5x8",
                  "--report", report, "--iterations", "1", "--warmup", "0",
                  "--no-calibration")
    assert res.code == 1, res.err
    first = json.loads(report.read_text())["parity"]["first_divergence"]
    assert first["torch_module"] == f"blocks.{K}.fc" and first["source"].endswith(block_line())
    assert first["node"].startswith(f"/blocks.{K}/fc/")


def test_a_failed_export_localizes_by_itself(files, tmp_path):
    """export's own parity check, failed (tolerances tighter than float32 rounding): the
    first divergence follows without asking, and every module before it is inside."""
    out, report = tmp_path / "tight.onnx", tmp_path / "r.json"
    res = run_cli(files["pt2"], "--target", "onnx", "-o", out, "--atol", "1e-12", "--rtol",
                  "1e-12", "--iterations", "1", "--warmup", "0", "--report", report)
    assert res.code == 1, res.err
    parity = json.loads(report.read_text())["parity"]
    first, errors = parity["first_divergence"], parity["module_errors"]
    assert parity["localized_by"] == "modules" and first["atol"] == 1e-12
    at = next(i for i, e in enumerate(errors) if e["module"] == first["torch_module"])
    assert all(e["passed"] for e in errors[:at]) and first["max_abs"] == errors[at]["max_abs"]
    assert first["max_abs"] < 1e-5  # rounding, not a wrong graph
    assert any(ln.startswith(f"first divergence: {first['torch_module']} — ")
               for ln in res.out.splitlines())
