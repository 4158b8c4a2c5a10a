"""Security round 3, names: a DEPLOYED graph's node names, namespaces and stack traces, and
its output names, are text its author chose (issue 40, defects 6 and 11). Each reaches the
terminal, the Markdown report and the plots only through export_gelu/shown.py: no escape
sequence, CR, C1 control or bidirectional override reaches a terminal; no backtick closes a
Markdown code span and no HTML renders; a megabyte-long name is shortened (plot labels to 80
characters) instead of failing the run with exit 4.

| case | where it shows |
|---|---|
| a node named with ESC, OSC 8, CR, C1, bidi, backtick, HTML | `inspect`, `inspect --node` |
| the same in its stack trace's file name | the first-divergence line, terminal and Markdown |
| a node's namespace and class hierarchy with the same | `inspect --node` |
| an output named with a megabyte of text | the summary, the Markdown table, a plot title |
| a first divergence at a node of a megabyte-long name | the error-by-depth plot's label |
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from export_gelu.check.localize.divergence import FirstDivergence, Localization, ModuleError
from export_gelu.report.plots import matplotlib_missing, plot_error_by_depth, plot_error_histograms
from export_gelu.shown import LABEL_LIMIT, NAME_LIMIT, label, md_code, md_text, shown, terminal
from tests.conftest import run_cli
from tests.hostile import RAW_CONTROLS, no_raw_controls

pytest.importorskip("onnxruntime")

#: An OSC 8 link, a window title, a clear screen, a CR, a C1 CSI, a bidi override, a
#: backtick and HTML: each something a terminal or a Markdown viewer would act on.
EVIL = ("\x1b]8;;http://evil.example/\x07link\x1b]8;;\x07\x1b]0;pwned\x07\x1b[2J\rX"
        "\x9b31m\u202eY`tick`<img src=x onerror=alert(1)>")
NODE = f"gelu{EVIL}"
HUGE = 1 << 20


# -- the display rule itself -----------------------------------------------------------------

def test_shown_neutralises_every_control_and_shortens():
    text = shown(EVIL + "\n\t\x00\x7f\u2028\ufeff")
    assert not any(ch in text for ch in (*RAW_CONTROLS, "\n", "\t", "\x00", "\x7f", "\u2028",
                                         "\ufeff"))
    assert "\\x1b]8;;http://evil.example/\\x07link" in text and "\\x0d" in text
    assert "\\x9b31m" in text and "\\u202e" in text and "\\u2028" in text
    long = shown("a" * 10 + "b" * HUGE + "c" * 10)
    assert len(long) == NAME_LIMIT and long.startswith("a" * 10) and long.endswith("c" * 10)
    assert "…" in long
    assert shown("plain_name.0") == "plain_name.0"
    assert terminal("line one\nline\ttwo\x1b[2J\r") == "line one\nline\ttwo\\x1b[2J\\x0d"


def test_markdown_forms_close_nothing_and_render_no_html():
    code = md_code("a`b``c")
    assert code == "```a`b``c```"
    assert md_code("`edge`") == "`` `edge` ``"
    text = md_text("<script>*x*</script> [a](javascript:alert(1)) | pipe")
    assert "<" not in text and "&lt;script&gt;" in text and "\\*x\\*" in text
    assert "\\[a\\]\\(javascript:alert\\(1\\)\\)" in text
    assert len(label("n" * HUGE)) == LABEL_LIMIT and label("$x^2$") == "\\$x^2\\$"


# -- a hostile DEPLOYED graph ----------------------------------------------------------------

@pytest.fixture(scope="module")
def bert_onnx(saved_model, session_cache) -> tuple[Path, Path]:
    """(the tiny BERT's ExportedProgram, its ONNX export), built once."""
    model = saved_model("bert", "exported")

    def build(path: Path) -> None:
        res = run_cli(model, "--target", "onnx", "-o", path, "--iterations", "0")
        assert res.code == 0, res.err

    return model, session_cache.file("bert-names.onnx", build)


def _props(node: onnx.NodeProto) -> dict[str, onnx.StringStringEntryProto]:
    return {p.key: p for p in node.metadata_props}


@pytest.fixture()
def hostile_graph(bert_onnx, tmp_path) -> tuple[Path, Path]:
    """(model, DEPLOYED): the first GELU named NODE, its stack trace's file named with EVIL
    and its math changed to Relu (so parity fails there, and the first divergence names it);
    the second GELU's namespace and class hierarchy hostile too."""
    model, onnx_path = bert_onnx
    graph = onnx.load(str(onnx_path))
    gelus = [n for n in graph.graph.node if n.op_type == "Gelu"]
    first, second = gelus[0], gelus[1]
    first.name = NODE
    first.op_type = "Relu"  # not the model's GELU: parity fails there
    del first.attribute[:]
    _props(first)["pkg.torch.onnx.stack_trace"].value = (
        f'File "/src/{EVIL}.py", line 30, in forward\n    return x\n')
    props = _props(second)
    props["pkg.torch.onnx.name_scopes"].value = repr(["", f"model{EVIL}", f"model{EVIL}.act"])
    props["pkg.torch.onnx.class_hierarchy"].value = repr(["M", f"Evil{EVIL}", "gelu"])
    keep = [p for p in second.metadata_props if p.key != "namespace"]
    del second.metadata_props[:]
    second.metadata_props.extend(keep)
    second.name = f"second{EVIL}"
    path = tmp_path / "hostile.onnx"
    onnx.save(graph, str(path))
    return model, path


def test_inspect_shows_hostile_node_names_as_text(hostile_graph):
    _model, path = hostile_graph
    res = run_cli("inspect", path, "--target", "onnx", "--node", NODE, "--node", f"second{EVIL}")
    assert res.code == 0, res.err
    no_raw_controls(res.out, res.err)
    assert "gelu\\x1b]8;;http://evil.example/\\x07link" in res.out
    node_lines = [ln for ln in res.out.splitlines() if ln.startswith("  node ")]
    assert len(node_lines) == 2, res.out  # a CR or LF in a name forges no line
    assert "Evil\\x1b]8;;http" in res.out  # the class hierarchy, as text
    res = run_cli("inspect", path, "--target", "onnx", "--json")
    assert res.code == 0 and json.loads(res.out)["gelu_sites"]  # JSON escapes them itself
    no_raw_controls(res.out)


def test_api_inspect_keeps_names_as_data(hostile_graph):
    from export_gelu import inspect_model

    _model, path = hostile_graph
    info = inspect_model(path, ["onnx"], nodes=[NODE])
    assert info["nodes"][0]["name"] == NODE  # data stays data; only display escapes it


def test_first_divergence_at_a_hostile_node_is_shown_as_text(hostile_graph, tmp_path):
    model, path = hostile_graph
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    res = run_cli("verify", model, path, "--iterations", "0", "--report-md", md, "--report", js)
    assert res.code == 1, res.err + res.out  # Relu where GELU was: parity fails there
    no_raw_controls(res.out, res.err)
    line = next(ln for ln in res.out.splitlines() if ln.startswith("first divergence:"))
    assert "Relu gelu\\x1b]8;;http://evil.example/\\x07link" in line, line
    report = json.loads(js.read_text())
    assert report["parity"]["first_divergence"]["node"] == NODE  # JSON keeps the data
    markdown = md.read_text()
    no_raw_controls(markdown)
    span = next(ln for ln in markdown.splitlines() if "first divergence:" in ln)
    fence = re.match(r"`+", span).group()
    assert len(fence) == 2 and span.endswith(fence)  # longer than the one-backtick runs inside
    assert "<img" not in _outside_code_spans(markdown)  # HTML only inside code spans


def _outside_code_spans(markdown: str) -> str:
    """The Markdown's text without its code spans (where HTML is shown, not rendered)."""
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", markdown)


def test_export_of_a_hostile_graph_prints_its_names_as_text(hostile_graph, tmp_path):
    """The graph as MODEL: its GELU sites (node names, modules) in the export's summary and
    Markdown report, as text."""
    _model, path = hostile_graph
    md = tmp_path / "e.md"
    res = run_cli(path, "--target", "ort", "-o", tmp_path / "e.onnx", "--iterations", "0",
                  "--report-md", md)
    assert res.code == 0, res.err + res.out
    no_raw_controls(res.out, res.err, md.read_text())
    assert "model\\x1b]8;;http://evil.example/\\x07link" in res.out  # the hostile module
    assert "<img" not in _outside_code_spans(md.read_text())


# -- megabyte names: shortened, never exit 4 -------------------------------------------------

def _relu_named(path: Path, output: str) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], [output], name=output[:10])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [2, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_megabyte_output_name_is_shortened_everywhere(tmp_path):
    """Issue 40, defect 11: the name reaches the summary, the Markdown table and a plot title
    shortened; the run ends as its parity says (it took minutes, then exit 4, "Image size …
    too large")."""
    name = "o" + "x" * HUGE + EVIL
    model = _relu_named(tmp_path / "m.onnx", name)
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    res = run_cli("verify", model, model, "--iterations", "1", "--report-md", md, "--report", js)
    assert res.code == 0, res.err[:2000]
    no_raw_controls(res.out, res.err, md.read_text())
    assert max(len(ln) for ln in res.out.splitlines()) < 2 * NAME_LIMIT + 200
    assert max(len(ln) for ln in md.read_text().splitlines()) < 4 * NAME_LIMIT
    assert list(json.loads(js.read_text())["parity"]["outputs"]) == [name]
    if matplotlib_missing() is None:
        _small_png(tmp_path / "r.errors.png")


def _small_png(path: Path) -> None:
    """A PNG of a sane size (a label of a megabyte made one of millions of pixels)."""
    import struct

    head = path.read_bytes()[:24]
    width, height = struct.unpack(">II", head[16:24])
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and width < 4000 and height < 4000, (width, height)


@pytest.mark.skipif(matplotlib_missing() is not None, reason="matplotlib is not installed")
def test_plot_labels_are_at_most_80_characters(tmp_path):
    """The error-by-depth plot labels the first divergence by its node when no module names
    it; the histograms title each output by its name."""
    node = "n" * HUGE + EVIL
    rows = [ModuleError(node if i == 3 else f"n{i}", f"t{i}", i, 10.0 ** (i - 6), 1.0, i < 3)
            for i in range(6)]
    first = FirstDivergence(node, "Gelu", "t3", "", "", 1e-3, 1e-4)
    out = plot_error_by_depth(Localization(first, rows, method="nodes"), tmp_path / "d.png")
    assert out is not None
    _small_png(tmp_path / "d.png")
    errors = {"y" * HUGE + "$\\frac{a}{b}$": np.abs(np.random.default_rng(0).standard_normal(64))}
    assert plot_error_histograms(errors, 1e-4, tmp_path / "h.png") is not None
    _small_png(tmp_path / "h.png")
