"""The new sources around Hugging Face folders: what a folder may hold (sharded safetensors, a
pickled .bin only when allowed, no custom code), `--task`, transformers missing, the output
folder's checks, safetensors state dicts with --model-factory, and export() on a module or an
ExportedProgram in memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import torch

from tests.conftest import ROOT, run_cli
from tests.hf_exports import saved_folder
from tests.hf_folders import save_folder
from tests.session_cache import SessionCache

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

QUICK = ("--iterations", "0", "--target", "ort")


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def bert(session_cache: SessionCache) -> Path:
    """The tiny BERT folder, saved once per test run (read-only: tests change copies)."""
    return saved_folder(session_cache, "bert")


def test_sharded_safetensors_folder_loads_every_shard(tmp_path: Path) -> None:
    folder = save_folder("bert", tmp_path / "sharded", max_shard_size="20KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    rep = tmp_path / "r.json"
    res = run_cli(folder, *QUICK, "-o", tmp_path / "b.onnx", "--report", rep)
    assert res.code == 0, res.err
    report = _report(rep)
    assert report["parity"]["status"] == "passed"
    assert any("shards" in n["message"] for n in report["notes"] if n["code"] == "hf-folder")


def test_shard_outside_the_folder_is_refused(tmp_path: Path) -> None:
    folder = save_folder("bert", tmp_path / "evil", max_shard_size="20KB")
    path = folder / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../elsewhere.safetensors"
    path.write_text(json.dumps(index))
    res = run_cli(folder, *QUICK, "-o", tmp_path / "b.onnx")
    assert res.code == 2
    assert "outside the model's folder" in res.err and "Traceback" not in res.err


def test_pickled_bin_weights_need_allow_pickle(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    folder = save_folder("bert", tmp_path / "bin")  # transformers 5 writes safetensors only
    weights = folder / "model.safetensors"
    torch.save(load_file(str(weights)), folder / "pytorch_model.bin")
    weights.unlink()
    out = tmp_path / "b.onnx"
    res = run_cli(folder, *QUICK, "-o", out)
    assert res.code == 2 and "--allow-pickle" in res.err and "pytorch_model.bin" in res.err
    assert not out.exists()
    res = run_cli(folder, *QUICK, "-o", out, "--allow-pickle")
    assert res.code == 0, res.err


def test_custom_code_in_config_is_refused(tmp_path: Path) -> None:
    folder = save_folder("bert", tmp_path / "remote")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(cfg))
    res = run_cli(folder, *QUICK, "-o", tmp_path / "b.onnx")
    assert res.code == 2 and "auto_map" in res.err


def test_folder_without_weights_and_unknown_task(bert: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text((bert / "config.json").read_text())
    res = run_cli(empty, *QUICK, "-o", tmp_path / "b.onnx")
    assert res.code == 2 and "no weights" in res.err
    res = run_cli(bert, *QUICK, "-o", tmp_path / "b.onnx", "--task", "make-coffee")
    assert res.code == 2 and "text-generation-with-past" in res.err
    res = run_cli(tmp_path, *QUICK)  # a folder without config.json
    assert res.code == 2 and "is a directory" in res.err


def test_task_flag_picks_another_head_and_says_what_is_new(bert: Path, tmp_path: Path) -> None:
    rep = tmp_path / "r.json"
    res = run_cli(bert, *QUICK, "-o", tmp_path / "c.onnx", "--report", rep,
                  "--task", "text-classification")
    assert res.code == 0, res.err
    report = _report(rep)
    assert report["task"] == "text-classification"
    assert [o.name for o in onnx.load(str(tmp_path / "c.onnx")).graph.output] == ["logits"]
    assert any("initialised at random" in n["message"] and "classifier" in n["message"]
               for n in report["notes"] if n["code"] == "hf-new-weights")


def test_without_transformers_exit_2_says_what_to_install(bert: Path, tmp_path: Path) -> None:
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'transformers':\n"
            "            raise ModuleNotFoundError(name=name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "from export_gelu.cli import main\n"
            f"sys.exit(main([{str(bert)!r}, '--target', 'ort', '-o', "
            f"{str(tmp_path / 'b.onnx')!r}]))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert res.returncode == 2, res.stderr
    assert "pip install 'export-gelu[hf]'" in res.stderr and "Traceback" not in res.stderr


def test_multi_graph_output_must_be_a_folder(tmp_path: Path) -> None:
    folder = save_folder("t5", tmp_path / "t5")
    taken = tmp_path / "taken"
    taken.write_text("mine")
    res = run_cli(folder, *QUICK, "-o", taken)
    assert res.code == 2 and "give a folder" in res.err
    assert taken.read_text() == "mine"
    res = run_cli(folder, *QUICK, "-o", tmp_path / "missing" / "out")
    assert res.code == 2 and "does not exist" in res.err
    res = run_cli(folder, *QUICK, "-o", tmp_path / "x", "--dynamic", "batch=1:2:4")
    assert res.code == 2 and "drop --dynamic" in res.err
    assert not (tmp_path / "x" / "encoder_model.onnx").exists()


def test_safetensors_state_dict_with_model_factory(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from examples.models import build

    weights = tmp_path / "vit.safetensors"
    save_file({k: v.contiguous() for k, v in build("vit").state_dict().items()}, str(weights))
    rep = tmp_path / "r.json"
    out = tmp_path / "vit.onnx"
    res = run_cli(weights, *QUICK, "-o", out, "--report", rep, "--model-factory",
                  "examples.models:vit", "--input", "x:2x3x32x32:float32")
    assert res.code == 0, res.err
    report = _report(rep)
    assert report["model_format"] == "safetensors state_dict"
    assert report["parity"]["status"] == "passed" and len(report["gelu_sites"]) == 2
    res = run_cli(weights, *QUICK, "-o", tmp_path / "again.onnx")
    assert res.code == 2 and "--model-factory" in res.err


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        y = self.fc2(torch.nn.functional.gelu(self.fc1(x), approximate="tanh"))
        return y if scale is None else y * scale


def test_api_exports_a_module_in_memory(tmp_path: Path) -> None:
    import export_gelu

    torch.manual_seed(0)
    model = _Mlp().train()
    out = tmp_path / "mlp.onnx"
    report = export_gelu.export(model, args=(torch.randn(2, 8),),
                                kwargs={"scale": torch.full((1,), 2.0)}, target="trt8.6",
                                output=out, iterations=0)
    assert report.exit_code == 0 and report.parity.status == "passed"
    assert [s.kind for s in report.gelu_sites] == ["tanh"]
    assert report.written == [str(out)] and out.is_file()
    assert report.model_format == "nn.Module (in memory)"
    assert "eval-mode" in [n.code for n in report.notes]
    assert model.training  # put back as it was
    assert [i.name for i in onnx.load(str(out)).graph.input] == ["x", "scale"]


def test_api_exports_an_exported_program_and_refuses_what_it_cannot(tmp_path: Path) -> None:
    import export_gelu
    from export_gelu.errors import BadInputError

    torch.manual_seed(0)
    program = torch.export.export(_Mlp().eval(), (torch.randn(2, 8),))
    out = tmp_path / "ep.onnx"
    report = export_gelu.export(program, target="trt8.2", output=out, iterations=0)
    assert report.parity.status == "passed" and report.opset == 13
    assert report.model_format == "ExportedProgram (in memory)"
    with pytest.raises(BadInputError, match="output="):
        export_gelu.export(program, target="ort")
    with pytest.raises(BadInputError, match="bundle"):
        export_gelu.export(program, target="trt8.6", output=tmp_path / "b.onnx",
                           bundle=tmp_path / "bundle")
    with pytest.raises(BadInputError, match="args="):
        export_gelu.export(str(out), args=(torch.randn(2, 8),), output=tmp_path / "c.onnx")
    with pytest.raises(BadInputError, match="tensors"):
        export_gelu.export(_Mlp(), args=(3,), output=tmp_path / "d.onnx")


def test_benchmark_reads_optimums_validation_verdict() -> None:
    """benchmarks/hf_vs_optimum.py reports optimum's own check as optimum logs it."""
    from benchmarks.hf_vs_optimum import optimum_parity

    ok = ('\t\t-[✓] all values close (atol: 1e-05)\n' * 3)
    assert optimum_parity(ok) == "passed (3 outputs within atol 1e-05)"
    over = ("\t\t-[✓] all values close (atol: 1e-05)\n"
            "\t\t-[x] values not close enough, max diff: 6.103515625e-05 (atol: 1e-05)\n"
            "The ONNX export succeeded with the warning: The maximum absolute difference "
            "between the output of the reference model and the ONNX exported model is not "
            "within the set tolerance 1e-05:\n- logits: max diff = 6.103515625e-05.\n")
    assert optimum_parity(over) == "over its atol 1e-05 (max diff 6.1e-05)"
    assert optimum_parity("nothing logged") == "not validated"
