"""Hostile and broken inputs: every loader and flag parser, each case → exit 2, one line.

Each case runs the real CLI (in-process; a representative subset also in a fresh program, one
for the subset: tests/child_cases.py) and
checks: exit code 2, stderr is exactly one line `export-gelu: error: …` holding the reason
below, no traceback, and nothing written to the output folder. Mislabeled *valid* files
(ONNX named .pt, TorchScript or an ExportedProgram named .onnx) are detected by content and
simply work (exit 0).

| case | input | reason on stderr (excerpt) |
|---|---|---|
| empty file | MODEL of 0 bytes | the file is empty |
| random bytes | MODEL of noise | not a PyTorch or ONNX model |
| JSON text | MODEL is a .json | not a PyTorch or ONNX model |
| directory | MODEL is a folder | is a directory |
| missing file | MODEL absent | no such file |
| truncated ExportedProgram | first half of the archive | corrupt or truncated |
| truncated TorchScript | first half of the archive | corrupt or truncated |
| truncated legacy state_dict | first half of a pre-1.6 torch.save | corrupt or truncated |
| truncated ONNX | first half of an .onnx | truncated or corrupt |
| ONNX without nodes | an empty graph | no nodes |
| ONNX failing the checker | an output without a shape | not a valid ONNX model |
| plain zip | a zip of a text file | not one torch.save |
| .npz as MODEL | input arrays given as the model | NumPy .npz archive |
| zip bomb (deflate) | 260 MiB of zeros in a 0.3 MiB archive | zip-bomb-like |
| zip bomb (header) | a member whose header declares 4 GiB | zip-bomb-like |
| tensor, not a model | torch.save(tensor) | holds a Tensor |
| list, not a model | torch.save([1, 2]) | holds a list |
| NaN in a state_dict | weights with NaN, right factory | holds NaN |
| NaN in ONNX weights | an initializer with NaN | holds NaN |
| ONNX .data missing | external data file deleted | which is missing |
| ONNX .data outside | location `../outside.bin` | outside the model's folder |
| ONNX .data truncated | .data cut short | truncated |
| ONNX zero dims | a `0` dimension, no --input | symbolic or zero |
| ONNX oversized dims | input declared 100000×100000×100 | more than the |
| state_dict misfit | factory builds another model | does not fit |
| --input bad shape | `x:4xQ` | is not like 1x128 |
| --input negative | `x:-1x4` | positive integer |
| --input zero | `x:0x10x8` | positive integer |
| --input oversized | `x:100000x100000x100` | more than the |
| --input bad dtype | `x:4x10x8:float8` | dtype |
| --input NaN range | `…:float32:nan,1` | finite LOW < HIGH |
| --input fp16 range | `…:float16:0,1e6` | does not fit float16 |
| --input fractional int range | `…:int64:0.2,0.7` | integer LOW,HIGH |
| --input int32 range | `…:int32:0,1e12` | does not fit int32 |
| --input bool range | `…:bool:0,1` | takes no range |
| --input twice | `x:…` given twice | the same name is given twice |
| --input count | 2 inputs for a 1-input forward() | forward() takes 1 |
| --input shape vs program | 4x10x9 for a 4x10x8 program | exported with shape |
| --input dtype vs program | int64 for a float32 input | int64 was given |
| --input with --inputs | both given | not both |
| --inputs missing | no such .npz | no such file |
| --inputs object array | np.savez of dicts | Python objects |
| --inputs NaN | an array with NaN | NaN or inf |
| --inputs float64 | np.savez default dtype | float64 |
| --inputs text | a text file | not a readable .npz |
| --inputs torch file | a torch.save zip | not a .npy array |
| --inputs oversized header | .npy header declares 10^12 elements | more than the |
| --inputs wrong name (ONNX) | npz names vs graph inputs | no input given |
| --inputs wrong dtype (ONNX) | int32 for a float input | in the graph |
| --model-factory no colon | `nocolon` | expected the form |
| --model-factory empty | `:` | expected the form |
| --model-factory bad name | `1bad:f` | expected the form |
| --model-factory unknown module | `no_such_mod_xyz:f` | cannot import |
| --model-factory missing attr | `examples.models:nope` | has no |
| --model-factory not callable | `examples.models:VOCAB` | not callable |
| --model-factory raises | `examples.models:build` (needs an argument) | calling it raised |
| --model-factory wrong type | `builtins:dict` | returned dict |
| --atol NaN | `--atol nan` | finite number |
| --rtol negative | `--rtol -1` | finite number |
| --atol not a number | `--atol abc` | invalid float value |
| --threads 0 | | at least 1 |
| --iterations negative | | cannot be negative |
| --opset too low | `--opset 3` | start at 7 |
| --dynamic malformed | `--dynamic garbage` | DIM=MIN:OPT:MAX |
| --target unknown | `--target trt99` | invalid choice |
| unknown flag | `--frobnicate` | unrecognized arguments |
| -o a directory | `-o DIR`, DIR holding a folder of the default name | is a directory |
| -o = --report | both name one file | name the same file |
| -o = input | output over the model | overwrite the input |
| -o missing folder | `-o nowhere/x.onnx` | does not exist |
| inspect a .pt | `inspect model.pt` | takes an ONNX file |
| inspect garbage | `inspect noise.bin` | not a PyTorch or ONNX model |
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from examples.models import EXAMPLES
from tests.child_cases import Case, run_cases, stderr_of
from tests.conftest import CliResult, run_cli

LSTM = EXAMPLES["lstm"]


# ---------------------------------------------------------------- files the cases are built from


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _half(src: Path, dst: Path) -> Path:
    data = src.read_bytes()
    return _write(dst, data[: len(data) // 2])


def tiny_onnx(weight: np.ndarray | None = None, dims: tuple = (2, 4),
              output_shape: bool = True) -> onnx.ModelProto:
    """y = Gelu-free MatMul(x, W): the smallest real graph ORT runs."""
    w = np.arange(16, dtype=np.float32).reshape(4, 4) / 16 if weight is None else weight
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                      [*dims[:-1], 4] if output_shape else None)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "g",
                              [x], [y], [numpy_helper.from_array(w, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _onnx_file(path: Path, model: onnx.ModelProto | None = None) -> Path:
    onnx.save(model or tiny_onnx(), str(path))
    return path


def _onnx_with_data(d: Path) -> Path:
    path = d / "ext.onnx"
    onnx.save(tiny_onnx(np.ones((4, 4), np.float32)), str(path), save_as_external_data=True,
              all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=0)
    return path


def _data_missing(d: Path) -> Path:
    path = _onnx_with_data(d)
    (d / "ext.onnx.data").unlink()
    return path


def _data_outside(d: Path) -> Path:
    path = _onnx_with_data(d)
    model = onnx.load(str(path), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../outside.bin"
    (d.parent / "outside.bin").write_bytes(bytes(64))
    onnx.save(model, str(path))
    return path


def _data_truncated(d: Path) -> Path:
    path = _onnx_with_data(d)
    _write(d / "ext.onnx.data", (d / "ext.onnx.data").read_bytes()[:20])
    return path


def _no_nodes(d: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph([], "g", [x], [x])
    return _onnx_file(d / "empty.onnx", helper.make_model(graph))


def _zip_bomb(d: Path) -> Path:
    path = d / "bomb.pt"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("archive/data.pkl", "w", force_zip64=True) as fh:
            for _ in range(260):
                fh.write(bytes(1 << 20))
    return path


def _header_bomb(d: Path) -> Path:
    """A stored member whose central-directory entry declares 4 GiB - 16 bytes."""
    path = d / "liar.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    data = bytearray(path.read_bytes())
    at = data.rindex(b"PK\x01\x02")
    data[at + 24:at + 28] = (0xFFFFFFF0).to_bytes(4, "little")
    return _write(path, bytes(data))


def _torch_save(path: Path, obj: object, legacy: bool = False) -> Path:
    torch.save(obj, str(path), _use_new_zipfile_serialization=not legacy)
    return path


def _nan_state_dict(d: Path) -> Path:
    from examples.models import lstm

    state = lstm().state_dict()
    state["fc1.weight"][0, 0] = float("nan")
    return _torch_save(d / "nan_sd.pt", state)


def _npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


def _npz_object(d: Path) -> Path:
    return _npz(d / "obj.npz", x=np.array([{"a": 1}, None], dtype=object))


def _npz_huge_header(d: Path) -> Path:
    """A .npz whose .npy header declares 10**12 float32 elements (and holds none)."""
    path = d / "huge.npz"
    header = {"descr": "<f4", "fortran_order": False, "shape": (10 ** 12,)}
    with zipfile.ZipFile(path, "w") as zf, zf.open("x.npy", "w") as fh:
        np.lib.format.write_array_header_1_0(fh, header)
    return path


# ---------------------------------------------------------------- the matrix

Builder = Callable[[Path, Callable[[str, str], Path]], list]


def _model_case(make: Callable[[Path, Callable], Path], *extra: str) -> Builder:
    return lambda d, saved: [make(d, saved), *extra]


EP = lambda d, s: s("lstm", "exported")  # noqa: E731
TS = lambda d, s: s("lstm", "torchscript")  # noqa: E731
SD = lambda d, s: s("lstm", "state_dict")  # noqa: E731
X = LSTM.input_spec

CASES: dict[str, tuple[Builder, str]] = {
    "empty file": (_model_case(lambda d, s: _write(d / "e.pt", b"")), "the file is empty"),
    "random bytes": (_model_case(lambda d, s: _write(d / "r.pt", bytes(range(7, 256)) * 8)),
                     "not a PyTorch or ONNX model"),
    "JSON text": (_model_case(lambda d, s: _write(d / "m.json", b'{"model": 1}')),
                  "not a PyTorch or ONNX model"),
    "directory": (_model_case(lambda d, s: d), "is a directory"),
    "missing file": (_model_case(lambda d, s: d / "nope.pt"), "no such file"),
    "truncated ExportedProgram": (_model_case(lambda d, s: _half(EP(d, s), d / "t.pt")),
                                  "corrupt or truncated"),
    "truncated TorchScript": (_model_case(lambda d, s: _half(TS(d, s), d / "t.pt"), "--input", X),
                              "corrupt or truncated"),
    "truncated legacy state_dict": (_model_case(lambda d, s: _half(_torch_save(
        d / "l.pt", torch.load(str(SD(d, s))), legacy=True), d / "lt.pt"),
        "--model-factory", LSTM.factory, "--input", X), "corrupt or truncated"),
    "truncated ONNX": (_model_case(lambda d, s: _half(_onnx_file(d / "m.onnx"), d / "t.onnx")),
                       "truncated or corrupt"),
    "ONNX without nodes": (_model_case(lambda d, s: _no_nodes(d)), "no nodes"),
    "ONNX failing the checker": (_model_case(lambda d, s: _onnx_file(d / "bad.onnx", tiny_onnx(
        output_shape=False))), "not a valid ONNX model"),
    "plain zip": (_model_case(lambda d, s: _plain_zip(d / "p.pt")), "not one torch.save"),
    ".npz as MODEL": (_model_case(lambda d, s: _npz(d / "in.npz", x=np.zeros(3, np.float32))),
                      "NumPy .npz archive"),
    "zip bomb (deflate)": (_model_case(lambda d, s: _zip_bomb(d)), "zip-bomb-like"),
    "zip bomb (header)": (_model_case(lambda d, s: _header_bomb(d)), "zip-bomb-like"),
    "tensor, not a model": (_model_case(lambda d, s: _torch_save(d / "t.pt", torch.ones(3))),
                            "holds a Tensor"),
    "list, not a model": (_model_case(lambda d, s: _torch_save(d / "l.pt", [1, 2])),
                          "holds a list"),
    "NaN in a state_dict": (_model_case(lambda d, s: _nan_state_dict(d), "--model-factory",
                                        LSTM.factory, "--input", X), "holds NaN"),
    "NaN in ONNX weights": (_model_case(lambda d, s: _onnx_file(d / "nan.onnx", tiny_onnx(
        np.full((4, 4), np.nan, np.float32)))), "holds NaN"),
    "ONNX .data missing": (_model_case(lambda d, s: _data_missing(d)), "which is missing"),
    "ONNX .data outside": (_model_case(lambda d, s: _data_outside(d)),
                           "outside the model's folder"),
    "ONNX .data truncated": (_model_case(lambda d, s: _data_truncated(d)), "truncated"),
    "ONNX zero dims": (_model_case(lambda d, s: _onnx_file(d / "zero.onnx", tiny_onnx(
        dims=(0, 4)))), "symbolic or zero"),
    "ONNX oversized dims": (_model_case(lambda d, s: _onnx_file(d / "big.onnx", tiny_onnx(
        dims=(100000, 100000, 100)))), "more than the"),
    "state_dict misfit": (_model_case(SD, "--model-factory", "examples.models:vit", "--input",
                                      X), "does not fit"),
    "--input bad shape": (_model_case(TS, "--input", "x:4xQ"), "is not like 1x128"),
    "--input negative": (_model_case(TS, "--input", "x:-1x4"), "positive integer"),
    "--input zero": (_model_case(TS, "--input", "x:0x10x8"), "positive integer"),
    "--input oversized": (_model_case(TS, "--input", "x:100000x100000x100"), "more than the"),
    "--input bad dtype": (_model_case(TS, "--input", "x:4x10x8:float8"), "dtype"),
    "--input NaN range": (_model_case(TS, "--input", "x:4x10x8:float32:nan,1"),
                          "finite LOW < HIGH"),
    "--input fp16 range": (_model_case(TS, "--input", "x:4x10x8:float16:0,1e6"),
                           "does not fit float16"),
    "--input fractional int range": (_model_case(TS, "--input", "x:4x10x8:int64:0.2,0.7"),
                                     "integer LOW,HIGH"),
    "--input int32 range": (_model_case(TS, "--input", "x:4:int32:0,1e12"),
                            "does not fit int32"),
    "--input bool range": (_model_case(TS, "--input", "x:4:bool:0,1"), "takes no range"),
    "--input twice": (_model_case(TS, "--input", X, "--input", X), "the same name is given"),
    "--input count": (_model_case(TS, "--input", X, "--input", "y:2"), "forward() takes 1"),
    "--input shape vs program": (_model_case(EP, "--input", "x:4x10x9"),
                                 "exported with shape"),
    "--input dtype vs program": (_model_case(EP, "--input", "x:4x10x8:int64"),
                                 "int64 was given"),
    "--input with --inputs": (lambda d, s: [TS(d, s), "--input", X, "--inputs", _npz(
        d / "a.npz", x=np.zeros((4, 10, 8), np.float32))], "not both"),
    "--inputs missing": (_model_case(TS, "--inputs", "/nonexistent/in.npz"), "no such file"),
    "--inputs object array": (lambda d, s: [TS(d, s), "--inputs", _npz_object(d)],
                              "Python objects"),
    "--inputs NaN": (lambda d, s: [TS(d, s), "--inputs", _npz(
        d / "n.npz", x=np.full((4, 10, 8), np.nan, np.float32))], "NaN or inf"),
    "--inputs float64": (lambda d, s: [TS(d, s), "--inputs", _npz(
        d / "f.npz", x=np.zeros((4, 10, 8)))], "float64"),
    "--inputs text": (lambda d, s: [TS(d, s), "--inputs", _write(d / "t.npz", b"hello")],
                      "not a readable .npz"),
    "--inputs torch file": (lambda d, s: [TS(d, s), "--inputs", SD(d, s)],
                            "not a .npy array"),
    "--inputs oversized header": (lambda d, s: [TS(d, s), "--inputs", _npz_huge_header(d)],
                                  "more than the"),
    "--inputs wrong name (ONNX)": (lambda d, s: [_onnx_file(d / "m.onnx"), "--inputs", _npz(
        d / "w.npz", z=np.zeros((2, 4), np.float32))], "no input given"),
    "--inputs wrong dtype (ONNX)": (lambda d, s: [_onnx_file(d / "m.onnx"), "--inputs", _npz(
        d / "w.npz", x=np.zeros((2, 4), np.int32))], "in the graph"),
    "--model-factory no colon": (_model_case(SD, "--model-factory", "nocolon", "--input", X),
                                 "expected the form"),
    "--model-factory empty": (_model_case(SD, "--model-factory", ":", "--input", X),
                              "expected the form"),
    "--model-factory bad name": (_model_case(SD, "--model-factory", "1bad:f", "--input", X),
                                 "expected the form"),
    "--model-factory unknown module": (_model_case(SD, "--model-factory", "no_such_mod_xyz:f",
                                                   "--input", X), "cannot import"),
    "--model-factory missing attr": (_model_case(SD, "--model-factory", "examples.models:nope",
                                                 "--input", X), "has no"),
    "--model-factory not callable": (_model_case(SD, "--model-factory", "examples.models:VOCAB",
                                                 "--input", X), "not callable"),
    "--model-factory raises": (_model_case(SD, "--model-factory", "examples.models:build",
                                           "--input", X), "calling it raised"),
    "--model-factory wrong type": (_model_case(SD, "--model-factory", "builtins:dict",
                                               "--input", X), "returned dict"),
    "--atol NaN": (_model_case(EP, "--atol", "nan"), "finite number"),
    "--rtol negative": (_model_case(EP, "--rtol", "-1"), "finite number"),
    "--atol not a number": (_model_case(EP, "--atol", "abc"), "invalid float value"),
    "--threads 0": (_model_case(EP, "--threads", "0"), "at least 1"),
    "--iterations negative": (_model_case(EP, "--iterations", "-1"), "cannot be negative"),
    "--opset too low": (_model_case(EP, "--opset", "3"), "start at 7"),
    "--dynamic malformed": (_model_case(EP, "--dynamic", "garbage"), "DIM=MIN:OPT:MAX"),
    "--target unknown": (_model_case(EP, "--target", "trt99"), "invalid choice"),
    "unknown flag": (_model_case(EP, "--frobnicate"), "unrecognized arguments"),
}


def _plain_zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("hello.txt", "hi")
    return path


def _assert_one_line_exit_2(code: int, err: str, needle: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("export-gelu: error:") or \
        lines[0].startswith("export-gelu inspect: error:"), err
    assert needle in lines[0], (needle, err)
    assert "Traceback" not in err


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_input_exits_2_with_one_line(case, saved_model, tmp_path):
    build, needle = CASES[case]
    work = tmp_path / "in"
    work.mkdir()
    argv = build(work, saved_model)
    out = tmp_path / "out"
    out.mkdir()
    res = run_cli(*argv, "-o", out / "x.onnx", "--report", out / "r.json")
    _assert_one_line_exit_2(res.code, res.err, needle)
    assert list(out.iterdir()) == [], "something was written"


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


OUTPUT_CASES: dict[str, tuple[Callable[[Path, Path], list], str]] = {
    # `-o DIR` writes DIR/<default name>: refused where that name is a folder
    "-o a directory": (lambda d, m: [m, "-o", _folder(d / "o" / "model.trt.onnx").parent],
                       "is a directory"),
    "-o = --report": (lambda d, m: [m, "-o", d / "a.onnx", "--report", d / "a.onnx"],
                      "name the same file"),
    "-o = input": (lambda d, m: [m, "-o", m], "overwrite the input"),
    "-o missing folder": (lambda d, m: [m, "-o", d / "nowhere" / "x.onnx"], "does not exist"),
    "inspect a .pt": (lambda d, m: ["inspect", m], "takes an ONNX file"),
    "inspect garbage": (lambda d, m: ["inspect", _write(d / "noise.bin", b"\x01\x02" * 64)],
                        "not a PyTorch or ONNX model"),
}


@pytest.mark.parametrize("case", list(OUTPUT_CASES))
def test_bad_output_and_command_cases(case, saved_model, tmp_path):
    build, needle = OUTPUT_CASES[case]
    model = tmp_path / "model.pt"
    model.write_bytes(saved_model("lstm", "exported").read_bytes())
    argv = build(tmp_path, model)
    before = sorted(p.name for p in tmp_path.iterdir() if p.name != "noise.bin")
    res = run_cli(*argv)
    _assert_one_line_exit_2(res.code, res.err, needle)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "noise.bin") == before
    assert model.read_bytes() == saved_model("lstm", "exported").read_bytes()


SUBPROCESS_CASES = ["truncated ExportedProgram", "zip bomb (header)", "--inputs object array",
                    "--model-factory raises", "ONNX .data outside", "--target unknown",
                    "NaN in a state_dict"]


@pytest.fixture(scope="module")
def console_runs(saved_model, tmp_path_factory: pytest.TempPathFactory) -> dict[str, CliResult]:
    """`SUBPROCESS_CASES` run as the console script runs them, in one fresh program
    (tests/child_cases.py): each case's own exit code and stderr, captured at the file
    descriptor, warnings shown afresh per case."""
    cases = []
    for case in SUBPROCESS_CASES:
        folder = tmp_path_factory.mktemp("console")
        build, _needle = CASES[case]
        argv = [str(a) for a in build(folder, saved_model)]
        cases.append(Case(case, argv=[*argv, "-o", str(folder / "o.onnx")]))
    return run_cases(cases)


@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_console_script_stderr_is_one_line(case, console_runs):
    """The same cases as a real process: nothing else (logs, warnings, what the program's
    imports print) reaches stderr."""
    _assert_one_line_exit_2(console_runs[case].code, stderr_of(console_runs, case),
                            CASES[case][1])


def test_debug_shows_the_traceback(tmp_path):
    bad = _write(tmp_path / "e.pt", b"")
    res = run_cli(bad, "--debug")
    assert res.code == 2 and "Traceback" in res.err


MISLABELED = {
    "ONNX named .pt": (lambda d, s: [_onnx_file(d / "graph.pt")], "ONNX"),
    "TorchScript named .onnx": (lambda d, s: [_copy(TS(d, s), d / "ts.onnx"), "--input", X],
                                "TorchScript"),
    "ExportedProgram named .onnx": (lambda d, s: [_copy(EP(d, s), d / "ep.onnx")],
                                    "ExportedProgram"),
}


def _copy(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    return dst


@pytest.mark.parametrize("case", list(MISLABELED))
def test_mislabeled_valid_files_work_by_content(case, saved_model, tmp_path):
    build, fmt = MISLABELED[case]
    argv = build(tmp_path, saved_model)
    res = run_cli(*argv, "--target", "ort", "-o", tmp_path / "out.onnx", "--report",
                  tmp_path / "r.json", "--iterations", "1", "--warmup", "0")
    assert res.code == 0, res.err
    rep = res.report(tmp_path / "r.json")
    assert rep["model_format"] == fmt
    assert rep["parity"]["status"] == "passed"
    onnx.checker.check_model(str(tmp_path / "out.onnx"))
