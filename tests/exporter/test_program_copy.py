"""exporter/capture/program_copy.py: a copy of an ExportedProgram has its own fake mode and
ShapeEnv (saved and loaded, not deep-copied), so one export cannot change the next one's
graph. A program with an unbacked symbol (a slice end read with `.item()`) compared over its
GELU forms: with deep copies, every form after the first failed its dynamo export on the
symbols the first left pending and was exported after run_decompositions (15 nodes against
10; erf no longer keep's graph)."""

from __future__ import annotations

from pathlib import Path

import onnx
import torch

from export_gelu.exporter.capture.program_copy import copy_program, save_program


class _SlicedMlp(torch.nn.Module):
    """x[:, :n.item()] through Linear, GELU (erf), Linear, summed over the sequence."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        k = n.item()
        torch._check(k >= 1)
        torch._check(k <= x.shape[1])
        return self.down(torch.nn.functional.gelu(self.up(x[:, :k]))).sum(1)


def _program() -> torch.export.ExportedProgram:
    return torch.export.export(_SlicedMlp().eval(), (torch.randn(2, 8, 16), torch.tensor(5)),
                               strict=False)


def _shape_env(program: torch.export.ExportedProgram) -> object:
    val = next(n.meta["val"] for n in program.graph.nodes if n.op == "placeholder")
    return val.fake_mode.shape_env


def test_a_copy_has_its_own_shape_env_and_export_gelus_attributes() -> None:
    program = _program()
    vars(program)["export_gelu_clamped"] = ["add"]
    copied = copy_program(program)
    assert copied is not program and str(copied.graph) == str(program.graph)
    assert _shape_env(copied) is not _shape_env(program)
    assert vars(copied)["export_gelu_clamped"] == ["add"]
    saved = save_program(program)
    assert saved is not None and saved.own == {"export_gelu_clamped": ["add"]}


def test_every_form_of_a_program_with_an_unbacked_symbol_exports_as_captured(
        tmp_path: Path) -> None:
    from export_gelu import compare_forms

    model = tmp_path / "sliced.pt2"
    torch.export.save(_program(), model)
    work = tmp_path / "graphs"
    work.mkdir()
    forms = compare_forms(str(model), targets=["onnx"], iterations=1, warmup=0,
                          workdir=str(work),
                          allow_pickle=True)  # (its runtime asserts' messages hold quotes)
    by = {r.form: r for r in forms.rows}
    assert by["keep"].same_as == ["erf"]  # the model's GELU is the erf form
    assert [(r.exporter, r.error) for r in forms.rows] == [("dynamo", "")] * 3
    nodes = {p.name.split(".")[1]: [n.op_type for n in onnx.load(p).graph.node]
             for p in work.glob("*.onnx")}
    assert len(nodes["keep"]) == 10 and "Gemm" not in nodes["keep"]
    assert nodes["tanh"] == nodes["keep"]  # ONNX's Gelu op, approximate="tanh"
    gelu = nodes["keep"].index("Gelu")  # the sigmoid form: the same graph around x·σ(1.702x)
    assert nodes["sigmoid"] == [*nodes["keep"][:gelu], "Mul", "Sigmoid", "Mul",
                                *nodes["keep"][gelu + 1:]]
