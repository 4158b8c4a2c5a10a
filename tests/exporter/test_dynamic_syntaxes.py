"""Every `--dynamic` spelling on inputs that share dims, and the axes torch ties for the user.

- How flags resolve against the axes a model names (resolve_flags): the INPUT:AXIS form given
  once per input joins one dim; different ranges on tied axes exit 2 naming both flags.
- torch capture (dynamic_capture.py) on small modules: an input the flags leave out is tied
  to their dim when the model makes it equal, stays static when it only has the same size,
  and dims torch says must be equal merge (same range) or exit 2 (different ranges).
- The README's dynamic-shapes section: it shows each spelling, and every command in it runs.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch
from torch import nn

from export_gelu.errors import BadInputError
from export_gelu.exporter.capture.dynamic_capture import export_dynamic
from export_gelu.exporter.feeds.dynamic_dims import resolve_flags
from export_gelu.exporter.feeds.dynamic_plan import DynamicPlan
from export_gelu.flags.dynamic import parse_dynamic_flag
from tests.conftest import ROOT

#: Two inputs named like `--input input_ids:batchxseq --input attention_mask:batchxseq`.
NAMED = {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"]}
#: The same inputs with numbers only (`--input input_ids:3x13`): nothing names their dims.
NUMERIC = {"input_ids": [3, 13], "attention_mask": [3, 13], "token_type_ids": [3, 13]}
#: An ONNX graph naming its dims N and L.
ONNX_NL = {"input_ids": ["N", "L"], "attention_mask": ["N", "L"]}


def _resolve(named: dict, *flags: str) -> dict[str, tuple]:
    dims = resolve_flags([parse_dynamic_flag(f) for f in flags], named, torch_model=True)
    return {d.name: ((d.min, d.opt, d.max), sorted(d.axes)) for d in dims}


BOTH_BATCH = [("attention_mask", 0), ("input_ids", 0)]
BOTH_SEQ = [("attention_mask", 1), ("input_ids", 1)]


@pytest.mark.parametrize("named,flags", [
    (NAMED, ["batch=1:4:8", "seq=8:16:64"]),
    (NAMED, ["batch=input_ids:0,attention_mask:0=1:4:8",
             "seq=input_ids:1,attention_mask:1=8:16:64"]),
    (NAMED, ["input_ids:0=1:4:8", "attention_mask:0=1:4:8", "input_ids:1=8:16:64",
             "attention_mask:1=8:16:64"]),
    (NAMED, ["input_ids:0=1:4:8", "input_ids:1=8:16:64"]),  # the named axis brings its ties
    (NUMERIC, ["batch=input_ids:0,attention_mask:0=1:4:8",
               "seq=input_ids:1,attention_mask:1=8:16:64"]),
    (NUMERIC, ["input_ids:0=1:4:8", "attention_mask:0=1:4:8", "input_ids:1=8:16:64",
               "attention_mask:1=8:16:64"]),
])
def test_every_spelling_gives_one_batch_and_one_seq(named, flags):
    assert _resolve(named, *flags) == {"batch": ((1, 4, 8), BOTH_BATCH),
                                       "seq": ((8, 16, 64), BOTH_SEQ)}


def test_an_axis_list_brings_the_axes_the_model_names_alike():
    """An ONNX graph's N is one symbol on both inputs: mapping one axis maps them all."""
    assert _resolve(ONNX_NL, "batch=input_ids:0=1:4:8") == {"batch": ((1, 4, 8), BOTH_BATCH)}


def test_unnamed_axes_with_their_own_ranges_are_dims_of_their_own():
    assert _resolve(NUMERIC, "input_ids:1=8:16:64", "attention_mask:1=8:16:32") == {
        "seq": ((8, 16, 64), [("input_ids", 1)]), "seq2": ((8, 16, 32), [("attention_mask", 1)])}


@pytest.mark.parametrize("named,flags,message", [
    (NAMED, ["input_ids:0=1:4:8", "attention_mask:0=1:2:8"],
     "--dynamic input_ids:0=1:4:8 and --dynamic attention_mask:0=1:2:8 give axes the model "
     "ties together (dim 'batch') different ranges (1:4:8 and 1:2:8)"),
    (NAMED, ["batch=1:4:8", "batch=1:2:8"],
     "--dynamic batch=1:4:8 and --dynamic batch=1:2:8 give dim 'batch' different ranges"),
    (ONNX_NL, ["batch=input_ids:0=1:4:8", "attention_mask:0=1:2:8"],
     "give axes the model ties together (dim 'batch') different ranges"),
    (NAMED, ["batch=1:4:8", "width=attention_mask:0=1:4:8"],
     "attention_mask:0, input_ids:0 is ranged by dim 'batch' (--dynamic batch=1:4:8) already"),
])
def test_conflicting_ranges_exit_2_naming_both_flags(named, flags, message):
    with pytest.raises(BadInputError) as info:
        _resolve(named, *flags)
    assert message in str(info.value)


# -- torch capture: the axes the flags leave out ------------------------------------------------

class Sum3(nn.Module):
    """`z` must match `x` (added to it); `y`'s rows are independent of x's."""

    def forward(self, x: torch.Tensor, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x + z).sum(-1, keepdim=True) * y.mean()


class MatMul(nn.Module):
    """x[:, k] @ w[k, :]: axis 1 of x and axis 0 of w must be equal."""

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w


def _capture(model: nn.Module, args: dict[str, torch.Tensor], named: dict, *flags: str
             ) -> tuple[DynamicPlan, dict[str, list]]:
    plan = DynamicPlan()
    plan.dims = resolve_flags([parse_dynamic_flag(f) for f in flags], named, torch_model=True)
    shapes = {n: tuple(a.shape) for n, a in args.items()}
    program = export_dynamic(plan, shapes, lambda ds: torch.export.export(
        model, tuple(args.values()), dynamic_shapes=ds, strict=False))
    user = [n for n in program.graph.nodes if n.op == "placeholder"]
    symbolic = {n: [not isinstance(s, int) for s in node.meta["val"].shape]
                for n, node in zip(args, user)}
    return plan, symbolic


def test_torch_ties_an_input_the_flags_leave_out_and_keeps_a_coincidence_static():
    args = {"x": torch.randn(3, 13), "z": torch.randn(3, 13), "y": torch.randn(3, 4)}
    named = {n: list(a.shape) for n, a in args.items()}
    plan, symbolic = _capture(Sum3(), args, named, "x:0=1:3:8", "x:1=8:13:64")
    assert {d.name: sorted(d.axes) for d in plan.dims} == {
        "batch": [("x", 0), ("z", 0)], "seq": [("x", 1), ("z", 1)]}
    assert symbolic == {"x": [True, True], "z": [True, True], "y": [False, False]}


def test_dims_torch_makes_equal_merge_when_their_ranges_agree():
    args = {"x": torch.randn(3, 5), "w": torch.randn(5, 7)}
    named = {n: list(a.shape) for n, a in args.items()}
    plan, symbolic = _capture(MatMul(), args, named, "x:1=2:5:9", "w:0=2:5:9")
    assert [(d.name, sorted(d.axes)) for d in plan.dims] == [("seq", [("w", 0), ("x", 1)])]
    assert symbolic == {"x": [False, True], "w": [True, False]}


def test_dims_torch_makes_equal_with_different_ranges_exit_2_naming_both():
    args = {"x": torch.randn(3, 5), "w": torch.randn(5, 7)}
    named = {n: list(a.shape) for n, a in args.items()}
    with pytest.raises(BadInputError) as info:
        _capture(MatMul(), args, named, "x:1=2:5:9", "w:0=2:5:16")
    text = str(info.value)
    assert "--dynamic x:1=2:5:9 and --dynamic w:0=2:5:16 range axes the model ties together" \
        in text and "different ranges (2:5:9 and 2:5:16)" in text


# -- the README's examples, run as written ------------------------------------------------------

def readme_commands() -> list[list[str]]:
    """The shell commands (`$ ` lines) of the README's dynamic-shapes task, continuation lines
    joined (tests/cli/test_docs_run.py also runs them and compares their output)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("Dynamic shapes (`--dynamic`)\n", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"```console\n(.*?)```", section, flags=re.S)
    joined = "\n".join(blocks).replace("\\\n", " ")
    return [shlex.split(line[2:]) for line in joined.splitlines() if line.startswith("$ ")]


def test_the_readme_section_shows_each_spelling():
    commands = [" ".join(c) for c in readme_commands()]
    exports = [c for c in commands if c.startswith("export-gelu")]
    assert any("--dynamic batch=1:4:8" in c for c in exports)  # DIM=MIN:OPT:MAX
    assert any("--dynamic batch=input_ids:0,attention_mask:0=1:4:8" in c for c in exports)
    assert any("--dynamic input_ids:0=1:4:8 --dynamic attention_mask:0=1:4:8" in c
               for c in exports)
    assert any("--dynamic" not in c for c in exports)  # an ExportedProgram saved dynamic
    assert all(c.startswith(("export-gelu ", "python -m export_gelu.examples.save_model "))
               for c in commands)


#: full (make test-full): tests/cli/test_docs_run.py's README block of this section
#: (test_block_runs_as_documented[README.md:105], in make test) runs the same commands with
#: the same flags and checks each exits 0 and prints its dims (`Dynamic dims: batch …, seq …`);
#: the graphs' named input dims of each spelling are pinned by test_dynamic_matrix's FAST cases
#: (named dims, axis lists, one INPUT:AXIS at a time, an ExportedProgram saved dynamic with no
#: flag); that the README shows each spelling by test_the_readme_section_shows_each_spelling.
@pytest.mark.full
def test_every_readme_example_runs(tmp_path, monkeypatch):
    """Each command as written, in a fresh folder: the examples are saved, each export exits
    0 with `batch` and `seq` on its graph's inputs."""
    import onnx

    from examples.save_model import main as save_main
    from tests.conftest import run_cli

    monkeypatch.chdir(tmp_path)
    assert save_main(["bert_model", "--format", "pickle", "-o", "bert.pkl"]) == 0  # README set-up
    for argv in readme_commands():
        if argv[0] == "python":
            assert save_main(argv[3:]) == 0, argv
            continue
        res = run_cli(*argv[1:])
        assert res.code == 0, (argv, res.err + res.out)
        kind = ".dynamic" if "--dynamic" in argv else ""  # the default name says --dynamic
        target = argv[argv.index("--target") + 1]
        out = tmp_path / Path(argv[1]).with_suffix(f".{target}{kind}.onnx")
        for vi in onnx.load(str(out)).graph.input:
            assert [d.dim_param for d in vi.type.tensor_type.shape.dim] == ["batch", "seq"], argv
