"""Pickle policy: nothing from a model file is unpickled without --allow-pickle.

Each malicious file below carries a payload that, if unpickled, writes a marker file. Every
case runs the CLI (in the test's process: the payload only writes its marker) and checks that
the marker is absent and the exit code is 2 without the flag; where loading with the flag is
meaningful, the marker then appears, which proves the payload was live (the test could fail)
rather than inert.

| file | what it hides | without --allow-pickle |
|---|---|---|
| torch.save zip | `exec` via `__reduce__` next to a real tensor | exit 2, "arbitrary Python code" |
| legacy torch.save | the same, pre-1.6 format | exit 2, "arbitrary Python code" |
| hand-built data.pkl | `builtins.exec` fetched from the memo, disguised by decoy strings | exit 2 |
| ExportedProgram | malicious sample inputs (torch falls back to full unpickling) | exit 2 |
| ExportedProgram | an AOTInductor member (a shared library) | exit 2, "compiled or pickled code" |
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from examples.models import EXAMPLES
from tests.conftest import CliResult, run_cli


class WritesMarker:
    """Unpickling this runs `exec`, which writes `marker`: weights_only refuses `exec`."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('unpickled')",))


def _cli(*argv: object) -> CliResult:
    return run_cli(*map(str, argv))


def _assert_refused(proc: CliResult, marker: Path, needle: str) -> None:
    assert not marker.exists(), "the payload ran without --allow-pickle"
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("export-gelu: error:"), proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def _zip_pickle(path: Path, marker: Path) -> Path:
    torch.save({"weight": torch.ones(2), "extra": WritesMarker(marker)}, str(path))
    return path


def _legacy_pickle(path: Path, marker: Path) -> Path:
    torch.save({"weight": torch.ones(2), "extra": WritesMarker(marker)}, str(path),
               _use_new_zipfile_serialization=False)
    return path


def _memo_disguised(path: Path, marker: Path) -> Path:
    """data.pkl hand-assembled so a naive scan sees only collections.OrderedDict.

    'builtins' and 'exec' are memoized first, decoy strings pushed last; STACK_GLOBAL then
    takes module and name from the memo (BINGET), not from the last literals.
    """
    code = f"open({str(marker)!r}, 'w').write('unpickled')".encode()
    p = bytearray(b"\x80\x02")
    for i, s in enumerate((b"builtins", b"exec")):
        p += b"X" + len(s).to_bytes(4, "little") + s + b"q" + bytes([i]) + b"0"  # push, memo, pop
    for s in (b"collections", b"OrderedDict"):
        p += b"X" + len(s).to_bytes(4, "little") + s + b"0"  # decoys: push, pop
    p += b"h\x00h\x01\x93"  # BINGET 0, BINGET 1, STACK_GLOBAL (protocol-4 opcode)
    p += b"X" + len(code).to_bytes(4, "little") + code + b"\x85R."  # TUPLE1, REDUCE, STOP
    buf = io.BytesIO()
    torch.save({}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            data = bytes(p) if info.filename.endswith("data.pkl") else zin.read(info)
            zout.writestr(info, data)
    return path


def _exported_program(path: Path) -> Path:
    ep = torch.export.export(nn.Sequential(nn.Linear(4, 4), nn.GELU()), (torch.randn(2, 4),))
    with path.open("wb") as fh:
        torch.export.save(ep, fh)
    return path


def _replace_member(src: Path, dst: Path, suffix: str, data: bytes, add: bool = False) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        root = zin.namelist()[0].split("/", 1)[0]
        for info in zin.infolist():
            body = data if info.filename.endswith(suffix) and not add else zin.read(info)
            zout.writestr(info, body)
        if add:
            zout.writestr(f"{root}/{suffix}", data)
    return dst


def _ep_with_malicious_inputs(path: Path, marker: Path) -> Path:
    buf = io.BytesIO()
    torch.save(((WritesMarker(marker),), {}), buf)
    return _replace_member(_exported_program(path.with_suffix(".clean.pt")), path,
                           "data/sample_inputs/model.pt", buf.getvalue())


def _ep_with_aoti(path: Path, marker: Path) -> Path:
    return _replace_member(_exported_program(path.with_suffix(".clean.pt")), path,
                           "data/aotinductor/model/model.so", b"\x7fELF not really", add=True)


def _ep_with_torchbind(path: Path, marker: Path) -> Path:
    return _replace_member(_exported_program(path.with_suffix(".clean.pt")), path,
                           "data/constants/custom_obj_0", b"not a torchbind object", add=True)


MALICIOUS = {
    "torch.save zip": (_zip_pickle, "arbitrary Python code"),
    "legacy torch.save": (_legacy_pickle, "arbitrary Python code"),
    "memo-disguised global": (_memo_disguised, "arbitrary Python code"),
    "ExportedProgram sample inputs": (_ep_with_malicious_inputs, "arbitrary Python code"),
    "ExportedProgram AOTInductor member": (_ep_with_aoti, "compiled or pickled code"),
    # one list of code members (exporter/model_files/detect.py) for the format check and containment
    "ExportedProgram torchbind member": (_ep_with_torchbind, "compiled or pickled code"),
}


@pytest.mark.parametrize("case", sorted(MALICIOUS))
def test_malicious_file_is_not_executed_without_allow_pickle(case, tmp_path):
    make, needle = MALICIOUS[case]
    marker = tmp_path / "MARKER"
    model = make(tmp_path / "model.pt", marker)
    proc = _cli(model, "-o", tmp_path / "out.onnx", "--input", "x:2x4")
    _assert_refused(proc, marker, needle)
    assert "--allow-pickle" in proc.stderr and "trust" in proc.stderr
    assert not (tmp_path / "out.onnx").exists()


#: slow (make test only) but "torch.save zip": that --allow-pickle lets a payload run is
#: pinned fast by that case; each payload's refusal, the behaviour, stays fast in
#: test_malicious_file_is_not_executed_without_allow_pickle.
@pytest.mark.parametrize("case", ["torch.save zip", *(
    pytest.param(c, marks=pytest.mark.slow)
    for c in ("legacy torch.save", "memo-disguised global", "ExportedProgram sample inputs"))])
def test_payload_is_live_so_the_refusal_means_something(case, tmp_path):
    """With --allow-pickle the same file does run its payload (proof the payload is live)."""
    make, _needle = MALICIOUS[case]
    marker = tmp_path / "MARKER"
    model = make(tmp_path / "model.pt", marker)
    proc = _cli(model, "--allow-pickle", "-o", tmp_path / "out.onnx", "--input", "x:2x4",
                "--no-verify")
    assert marker.exists(), proc.stderr
    assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr


def test_weights_only_is_tried_first_for_state_dicts(saved_model, tmp_path):
    """A state_dict loads without --allow-pickle (weights_only), also in the legacy format."""
    from export_gelu.exporter.loading.load import load_model

    model = torch.load(str(saved_model("lstm", "state_dict")), weights_only=True)
    legacy = tmp_path / "legacy.pt"
    torch.save(model, str(legacy), _use_new_zipfile_serialization=False)
    for path in (saved_model("lstm", "state_dict"), legacy):
        loaded = load_model(path, model_factory=EXAMPLES["lstm"].factory)
        assert loaded.format.value == "state_dict"
        assert isinstance(loaded.module, nn.Module)


def test_training_checkpoint_nesting_a_state_dict_loads(saved_model, tmp_path):
    from export_gelu.exporter.loading.load import load_model

    state = torch.load(str(saved_model("lstm", "state_dict")), weights_only=True)
    ckpt = tmp_path / "ckpt.pt"
    torch.save({"model": state, "epoch": 3, "lr": 0.1}, str(ckpt))
    loaded = load_model(ckpt, model_factory=EXAMPLES["lstm"].factory)
    assert any("'model' entry" in n for n in loaded.notes)


def test_pickled_module_message_names_its_classes_and_the_risk(saved_model):
    from export_gelu.errors import BadInputError
    from export_gelu.exporter.loading.load import load_model

    with pytest.raises(BadInputError) as err:
        load_model(saved_model("lstm", "pickle"))
    text = str(err.value)
    assert "LSTMRegressor" in text and "arbitrary Python code" in text
    assert "torch.export.save" in text  # says what to do instead


def test_a_plain_pickle_that_is_not_torch_is_refused_too(tmp_path):
    marker = tmp_path / "MARKER"
    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps(WritesMarker(marker), protocol=2))
    proc = _cli(path, "-o", tmp_path / "o.onnx")
    _assert_refused(proc, marker, "--allow-pickle")
