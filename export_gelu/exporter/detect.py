"""Which kind of model file is this? Decided by content, never by extension (KNOWLEDGE.md §4)."""

from __future__ import annotations

import enum
import pickletools
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from export_gelu.errors import BadInputError

#: Globals a plain state_dict pickle may name; anything else names code (a class or function).
_TENSOR_GLOBAL_PREFIXES = ("torch._utils _rebuild", "torch._tensor _rebuild", "torch.serialization")
_TENSOR_GLOBALS = {"collections OrderedDict", "torch device", "torch Size", "torch dtype",
                   "torch.storage UntypedStorage", "builtins dict", "__builtin__ dict"}

#: Refuse archives that declare more than this many uncompressed bytes per member before reading.
MAX_MEMBER_BYTES = 1 << 40


class ModelFormat(enum.Enum):
    EXPORTED_PROGRAM = "ExportedProgram"
    TORCHSCRIPT = "TorchScript"
    PICKLED_MODULE = "pickled nn.Module"
    STATE_DICT = "state_dict"
    ONNX = "ONNX"


@dataclass
class Detected:
    """The format found, plus what the pickle names (for messages about pickled code)."""

    format: ModelFormat
    pickle_globals: list[str] = field(default_factory=list)


def _pickle_globals(data: bytes) -> list[str]:
    """Globals a pickle references, found without executing it."""
    names: list[str] = []
    strings: list[str] = []
    try:
        for op, arg, _pos in pickletools.genops(data):
            if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
                strings.append(str(arg))
            elif op.name == "GLOBAL":
                names.append(str(arg))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                names.append(f"{strings[-2]} {strings[-1]}")
    except Exception as exc:  # noqa: BLE001 - pickletools raises ValueError and others
        raise BadInputError(f"the pickle inside the file is corrupt or truncated ({exc})") from exc
    return names


def _names_code(globals_: list[str]) -> list[str]:
    """The globals that are not plain tensor/container rebuilders, i.e. that name code."""
    code = []
    for g in globals_:
        if g in _TENSOR_GLOBALS or g.startswith(_TENSOR_GLOBAL_PREFIXES):
            continue
        if g.startswith("torch ") and (g.endswith("Storage") or g.split()[1] in
                                        {"float32", "float16", "bfloat16", "int64"}):
            continue
        code.append(g.replace(" ", "."))
    return sorted(set(code))


def _detect_zip(path: Path) -> Detected:
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            names = [i.filename for i in infos]
            for info in infos:
                if info.file_size > MAX_MEMBER_BYTES:
                    raise BadInputError(
                        f"{path}: archive member {info.filename!r} declares "
                        f"{info.file_size} bytes; refusing to read it"
                    )
            if any(n.endswith("/archive_format") or n == "archive_format" for n in names) or any(
                "/models/" in n and n.endswith(".json") for n in names
            ):
                return Detected(ModelFormat.EXPORTED_PROGRAM)
            if any("/code/" in n or n.startswith("code/") for n in names) and any(
                n.endswith("constants.pkl") for n in names
            ):
                return Detected(ModelFormat.TORCHSCRIPT)
            pkl = [n for n in names if n.endswith("data.pkl")]
            if pkl:
                globals_ = _pickle_globals(zf.read(pkl[0]))
                code = _names_code(globals_)
                fmt = ModelFormat.PICKLED_MODULE if code else ModelFormat.STATE_DICT
                return Detected(fmt, code)
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise BadInputError(f"{path}: corrupt or truncated archive ({exc})") from exc
    raise BadInputError(
        f"{path}: a zip archive, but not one torch.save, torch.jit.save or torch.export.save wrote"
    )


def _looks_like_onnx(path: Path) -> bool:
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - protobuf raises DecodeError and others on garbage
        return False
    return model.ir_version > 0 and len(model.graph.node) > 0


def detect_format(path: str | Path) -> Detected:
    """Detect a model file's format from its bytes; raise BadInputError with a reason if none."""
    path = Path(path)
    if not path.exists():
        raise BadInputError(f"{path}: no such file")
    if path.is_dir():
        raise BadInputError(f"{path}: is a directory, not a model file")
    size = path.stat().st_size
    if size == 0:
        raise BadInputError(f"{path}: the file is empty")
    with path.open("rb") as fh:
        head = fh.read(8)
    if head.startswith(b"PK\x03\x04") or zipfile.is_zipfile(path):
        return _detect_zip(path)
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        # Legacy (pre-1.6) torch.save: a sequence of pickles. Treat as code-bearing.
        data = path.read_bytes()
        return Detected(ModelFormat.PICKLED_MODULE, _names_code(_pickle_globals(data)))
    if _looks_like_onnx(path):
        return Detected(ModelFormat.ONNX)
    raise BadInputError(
        f"{path}: not a PyTorch or ONNX model (unrecognised content, first bytes {head[:4]!r})"
    )
