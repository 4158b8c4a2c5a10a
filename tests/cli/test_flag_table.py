"""One declaration per flag (export_gelu/flag_table/table.py): the parsers, the options records,
the API's keywords and docs/cli.md come from it. Every flag is a keyword of its API function
under its own name and reaches the record; the command line and the API refuse the same
combinations with the same words; the generated module is what the table gives; and a new
flag is one record."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import onnx
import pytest

import export_gelu
from export_gelu import api, flag_table
from export_gelu.cli_docs import RECORDS_MODULE, render_records
from export_gelu.errors import ExportGeluError
from export_gelu.flag_table.parsers import PARSERS
from export_gelu.flags.declare import RECORD_OF, Flag, keyword_of
from export_gelu.flags.keywords import KeywordError, keyword_values
from export_gelu.flags.parsers import build_parser
from export_gelu.flags.record import plain
from export_gelu.flags.source import render_module
from export_gelu.progress import Progress
from tests.conftest import run_cli
from tests.onnx_graphs import hand_graph

FUNCTIONS = {"export": api.export, "verify": api.verify, "compare_forms": api.compare_forms,
             "inspect_model": api.inspect_model}
#: The parser whose flags each function takes (compare_forms: export's, as --compare-forms).
PARSER_OF_FUNCTION = {"export": "export", "verify": "verify", "inspect_model": "inspect"}
#: Not flags of a run: what argparse prints and exits on.
NOT_KEYWORDS = {"help", "version"}

#: A value each keyword takes (a path: a name under the test's folder). A new flag fails
#: test_every_keyword_has_a_sample until it has one here.
SAMPLES: dict[str, Any] = {
    "target": "trt8.6", "output": "PATH", "gelu": "erf", "compare_forms": True, "opset": 17,
    "precision": "fp16", "cast_down": True, "engine": "PATH", "dynamic": ["batch=1:2:4"],
    "static": True, "require_trt": True, "bundle": "PATH", "verify": False, "localize": True,
    "output_names": "y", "allow_pickle": True, "trust_model": True,
    "model_factory": "pkg.mod:build", "imports": ["json"], "task": "fill-mask",
    "input": ["x:2x8"], "inputs": "PATH", "atol": 0.5, "rtol": 0.25, "threads": 1,
    "device": "cpu", "iterations": 2, "warmup": 0, "report": "PATH", "report_md": "PATH",
    "debug": True, "quiet": True, "save_inputs": "PATH", "save_outputs": "PATH",
    "calibration": False, "device_outputs": "PATH", "device_times": "PATH",
    "targets": ["onnx"], "forms": ["erf"], "workdir": "DIR", "json": True, "dry_run": False,
    "nodes": ["n"], "node": ["n"], "calibration_data": "PATH", "calibrator": "entropy",
    "keep_precision": ["m"], "target_sqnr": 40.0,
}


def _keywords(function: str) -> list[tuple[Flag, str]]:
    spec = next(a for a in flag_table.APIS if a.function == function)
    return [(f, k) for f in spec.flags(flag_table.FLAGS) for k in f.api_keywords]


CASES = [(fn, flag, k) for fn in FUNCTIONS for flag, k in _keywords(fn)]


def _sample(keyword: str, folder: Path) -> Any:
    value = SAMPLES[keyword]
    return folder / "out" if value == "PATH" else folder if value == "DIR" else value


def test_the_committed_records_are_the_table() -> None:
    assert RECORDS_MODULE.read_text(encoding="utf-8") == render_records(), (
        "export_gelu/option_records.py differs from the flag table: regenerate it with "
        "`python -m export_gelu.cli_docs --write` and commit it")


def test_every_keyword_has_a_sample() -> None:
    assert {k for _fn, _f, k in CASES} - set(SAMPLES) == set()


@pytest.mark.parametrize("function", sorted(PARSER_OF_FUNCTION))
def test_every_flag_of_the_parser_is_a_keyword_by_its_own_name(function: str) -> None:
    """The flags `--help` prints (quiet, debug, compare-forms and json included) are
    keywords of the function, by the rule (inspect's repeatable --target and --node also
    by their plural, its first parameters)."""
    params = inspect.signature(FUNCTIONS[function]).parameters
    options = [o for a in flag_table.parser(PARSER_OF_FUNCTION[function])._actions  # noqa: SLF001
               for o in a.option_strings if o.startswith("--")]
    missing = [o for o in options if keyword_of(o) not in NOT_KEYWORDS | set(params)]
    assert missing == [] and "--quiet" in options


@pytest.mark.parametrize("function,flag,keyword", CASES,
                         ids=[f"{fn}-{k}" for fn, _f, k in CASES])
def test_every_flag_is_accepted_by_the_api_under_its_own_name(function: str, flag: Flag,
                                                             keyword: str,
                                                             tmp_path: Path) -> None:
    """Called with the keyword alone, on a model that is not there: whatever refuses the call
    is about the model or the combination, never the keyword; and the value reaches the
    command's options record under the flag's field."""
    value = _sample(keyword, tmp_path)
    model = tmp_path / ("absent.onnx" if function == "inspect_model" else "absent.pt")
    with pytest.raises(ExportGeluError) as refused:
        FUNCTIONS[function](model, **{keyword: value})
    assert not isinstance(refused.value, KeywordError), refused.value
    command = "compare-forms" if function == "compare_forms" else (
        "inspect" if function == "inspect_model" else function)
    if flag.field_name and {RECORD_OF[command], "run"} & set(flag.records):
        record = flag_table.BUILD[command](flag_table.api_values(function, {keyword: value}))
        held = getattr(record, flag.field_name)
        assert held == plain(value) or held == (plain(value),), (keyword, held)


def test_a_keyword_is_refused_under_another_function_s_flag() -> None:
    with pytest.raises(KeywordError, match=r"verify\(\) has no keyword 'gelu'"):
        export_gelu.verify("absent.pt", "absent.onnx", gelu="erf")
    with pytest.raises(KeywordError, match="targets and target are one flag"):
        export_gelu.inspect_model("absent.onnx", targets=["onnx"], target=["ort"])


def test_quiet_silences_the_progress_the_api_was_given(tmp_path: Path, capsys) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(hand_graph("tanh x*x*x"), str(model))
    loud = export_gelu.export(model, target="onnx", output=tmp_path / "a.onnx", iterations=0,
                              progress=Progress(enabled=True))
    assert loud.exit_code == 0 and "…" in capsys.readouterr().err
    quiet = export_gelu.export(model, target="onnx", output=tmp_path / "b.onnx", iterations=0,
                               progress=Progress(enabled=True), quiet=True)
    assert quiet.exit_code == 0 and capsys.readouterr().err == ""
    assert "quiet" not in quiet.options  # a setting of the run, not an option it records


def test_inspect_json_is_what_the_command_line_prints(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(hand_graph("tanh x*x*x"), str(model))
    text = export_gelu.inspect_model(model, json=True, target="onnx", quiet=True)
    res = run_cli("inspect", model, "--json", "--target", "onnx", "--quiet")
    assert res.code == 0 and res.out == text + "\n"
    assert json.loads(text) == export_gelu.inspect_model(model, ["onnx"])


# ---------------------------------------------------------------- the same refusals

#: (the command line after MODEL, the API call on (model, folder)): refused alike.
COMBINATIONS = {
    "--compare-forms -o": (
        lambda d: ["--compare-forms", "-o", str(d / "x.onnx")],
        lambda m, d: export_gelu.export(m, compare_forms=True, output=d / "x.onnx")),
    "--compare-forms --gelu": (
        lambda d: ["--compare-forms", "--gelu", "tanh"],
        lambda m, d: export_gelu.export(m, compare_forms=True, gelu="tanh")),
    "--compare-forms --cast-down": (
        lambda d: ["--compare-forms", "--cast-down"],
        lambda m, d: export_gelu.export(m, compare_forms=True, cast_down=True)),
    "--compare-forms --iterations 0": (
        lambda d: ["--compare-forms", "--iterations", "0"],
        lambda m, d: export_gelu.export(m, compare_forms=True, iterations=0)),
    "--compare-forms --bundle --target ort": (
        lambda d: ["--compare-forms", "--bundle", str(d / "B"), "--target", "ort"],
        lambda m, d: export_gelu.compare_forms(m, bundle=d / "B", target="ort")),
    "--compare-forms --bundle (compare_forms)": (
        lambda d: ["--compare-forms", "--bundle", str(d / "B"), "--input", "x:2",
                   "--inputs", str(d / "in.npz")],
        lambda m, d: export_gelu.compare_forms(m, bundle=d / "B", input=["x:2"],
                                               inputs=d / "in.npz")),
    "--localize --no-verify": (
        lambda d: ["--localize", "--no-verify"],
        lambda m, d: export_gelu.export(m, localize=True, verify=False)),
    "--bundle --target ort": (
        lambda d: ["--bundle", str(d / "B"), "--target", "ort"],
        lambda m, d: export_gelu.export(m, bundle=d / "B", target="ort")),
    "--gelu plugin --target onnx": (
        lambda d: ["--gelu", "plugin", "--target", "onnx"],
        lambda m, d: export_gelu.export(m, gelu="plugin", target="onnx")),
    "verify --device-times, no --device-outputs": (
        lambda d: ["verify", "DEPLOYED", "--device-times", str(d / "t.json")],
        lambda m, d: export_gelu.verify(m, d / "d.onnx", device_times=d / "t.json")),
}


@pytest.mark.parametrize("name", COMBINATIONS)
def test_the_command_line_and_the_api_refuse_a_combination_alike(name: str,
                                                                tmp_path: Path) -> None:
    words, call = COMBINATIONS[name]
    model = tmp_path / "absent.pt"  # never opened: the options are refused first
    argv = [str(tmp_path / "d.onnx") if w == "DEPLOYED" else w for w in words(tmp_path)]
    argv = argv[:1] + [str(model)] + argv[1:] if argv[0] == "verify" else [str(model), *argv]
    res = run_cli(*argv)
    with pytest.raises(ExportGeluError) as refused:
        call(model, tmp_path)
    assert res.code == refused.value.exit_code in (2, 3) and res.out == ""
    assert res.err == f"export-gelu: error: {refused.value}\n"
    assert not (tmp_path / "B").exists()


# ---------------------------------------------------------------- a new flag

def test_a_new_flag_is_one_record() -> None:
    """What a new `--held-out-data FILE` would take: one Flag, and the parser, the record,
    the keyword type, the API's keyword and the signature all have it."""
    new = Flag(("--held-out-data",), group="inputs", commands=("export",),
               records=("export",), path=True, metavar="FILE.npz",
               help="arrays the INT8 ranges are calibrated on")
    flags = (*flag_table.FLAGS, new)
    parser = build_parser(PARSERS["export"], flags)
    args = parser.parse_args(["m.pt", "--held-out-data", "c.npz"])
    assert args.held_out_data == "c.npz"
    assert "--held-out-data FILE.npz" in parser.format_help()
    source = render_module(flags, flag_table.RECORDS, flag_table.APIS)
    export_record = source.split("class ExportOptions(RunOptions):")[1].split("\n\n\n")[0]
    assert ("    held_out_data: str | None = None  # --held-out-data FILE.npz"
            in export_record)
    export_keywords = source.split("class ExportKeywords(")[1].split("\n\n\n")[0]
    assert "    held_out_data: str | PathLike[str] | None" in export_keywords
    spec = next(a for a in flag_table.APIS if a.function == "export")
    values = keyword_values("export", spec.flags(flags), {"held_out_data": Path("c.npz")})
    assert values == {"held_out_data": Path("c.npz")}
