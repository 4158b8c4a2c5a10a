"""Which kind of model file is this? Decided by content, never by extension (docs/exporters.md).

Nothing here runs code from the file: archives are read through their directory, pickles are
only disassembled (`pickletools`), ONNX is parsed as protobuf. Sizes are checked before any
member is read, so an archive that declares more bytes than it can hold (a zip bomb, or a
truncated download) is refused up front.
"""

from __future__ import annotations

import enum
import io
import pickletools
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from export_gelu.errors import BadInputError

#: Globals a plain state_dict pickle may name; anything else names code (a class or function).
_TENSOR_GLOBAL_PREFIXES = ("torch._utils _rebuild", "torch._tensor _rebuild", "torch.serialization")
_TENSOR_GLOBALS = {"collections OrderedDict", "torch device", "torch Size", "torch dtype",
                   "torch.storage UntypedStorage", "builtins dict", "__builtin__ dict"}

#: Declared uncompressed bytes may exceed the file's size by this factor (torch archives store
#: members uncompressed, so real ones sit near 1) …
MAX_EXPANSION = 100
#: … or by this much in absolute terms, whichever is larger.
MAX_EXPANSION_SLACK = 256 << 20
#: More members than any model archive has.
MAX_MEMBERS = 200_000
#: A `data.pkl` holds structure, not weights; larger than this is not a model's.
MAX_PICKLE_BYTES = 256 << 20
#: How much of a legacy (non-zip) torch.save file is disassembled to name its globals.
LEGACY_SCAN_BYTES = 64 << 20
#: Protobuf cannot hold more than 2 GiB, so an ONNX file (without its external data) cannot.
MAX_ONNX_PROTO_BYTES = 2 << 30

#: The program of an ExportedProgram archive in the layout torch.export.save wrote up to torch
#: 2.7 (at the archive's root, beside `version`, `serialized_state_dict.pt`, …); torch 2.8 and
#: newer write the pt2 archive (`<name>/archive_format`, `<name>/models/<model>.json`).
LEGACY_PROGRAM = "serialized_exported_program.json"

#: ExportedProgram archive members that torch.export.load would run rather than read:
#: AOTInductor shared libraries, pickled opaque objects (`pickle.loads`), torchbind objects
#: (C++ `__setstate__`); lower case. The one list: `detect` names those spelled so (the
#: format check's refusal), containment refuses them in any case (torch's reader matches
#: names in any case).
PROGRAM_CODE_MEMBERS = ("data/aotinductor/", "data/constants/opaque_obj_",
                        "data/constants/custom_obj_", "data/executorch/")


class ModelFormat(enum.Enum):
    EXPORTED_PROGRAM = "ExportedProgram"
    TORCHSCRIPT = "TorchScript"
    PICKLED_MODULE = "pickled nn.Module"
    STATE_DICT = "state_dict"
    SAFETENSORS = "safetensors state_dict"
    ONNX = "ONNX"
    HF_FOLDER = "Hugging Face folder"
    IN_MEMORY_MODULE = "nn.Module (in memory)"
    IN_MEMORY_PROGRAM = "ExportedProgram (in memory)"


@dataclass
class Detected:
    """The format found, plus what in it names code (for messages about pickled code).

    `pickle_globals`: classes/functions a pickle names (not executed, only disassembled).
    `code_members`: archive members that loading would execute (AOTInductor libraries,
    pickled opaque objects) — refused unless the user allows pickles.
    """

    format: ModelFormat
    pickle_globals: list[str] = field(default_factory=list)
    code_members: list[str] = field(default_factory=list)


def pickle_globals(data: bytes, max_pickles: int = 1) -> list[str]:
    """Globals named by up to `max_pickles` consecutive pickles in `data`, without running them.

    `STACK_GLOBAL` takes its module and name from the stack; the two most recent string
    pushes are taken as those (memo tricks can hide a name from this, which is why the safety
    decision is never this scan alone: loading always goes through `weights_only` first).
    """
    names: list[str] = []
    stream = io.BytesIO(data)
    for index in range(max_pickles):
        if stream.tell() >= len(data):
            break
        strings: list[str] = []
        try:
            for op, arg, _at in pickletools.genops(stream):
                if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
                    strings.append(str(arg))
                elif op.name == "GLOBAL":
                    names.append(str(arg))
                elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                    names.append(f"{strings[-2]} {strings[-1]}")
        except Exception as exc:  # noqa: BLE001 - pickletools raises ValueError and others
            if index > 0:
                break  # in a legacy file, raw tensor bytes follow the last pickle
            raise BadInputError(
                f"the pickle inside the file is corrupt or truncated ({exc})") from exc
    return names


def names_code(globals_: list[str]) -> list[str]:
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


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n < (1 << 30) else f"{n / (1 << 30):.2f} GiB"


def _check_archive_sizes(path: Path, infos: list[zipfile.ZipInfo], size: int) -> None:
    """Refuse archives whose declared sizes cannot be real, before any member is read."""
    if len(infos) > MAX_MEMBERS:
        raise BadInputError(f"{path}: archive lists {len(infos)} members; refusing to read it")
    declared = sum(i.file_size for i in infos)
    if declared > max(size * MAX_EXPANSION, MAX_EXPANSION_SLACK):
        biggest = max(infos, key=lambda i: i.file_size)
        raise BadInputError(
            f"{path}: archive declares {_mib(declared)} uncompressed in a {_mib(size)} file "
            f"(member {biggest.filename!r}: {_mib(biggest.file_size)}), zip-bomb-like; "
            "refusing to read it")
    for info in infos:
        stored = info.compress_type == zipfile.ZIP_STORED
        if (stored and info.file_size != info.compress_size) or \
                info.header_offset + info.compress_size > size:
            raise BadInputError(
                f"{path}: corrupt or truncated archive (member {info.filename!r} declares "
                f"{info.compress_size} bytes past the end of the {size}-byte file)")


def _strip_root(name: str) -> str:
    """Member name without the archive's top-level folder (torch writes `<stem>/...`)."""
    return name.split("/", 1)[1] if "/" in name else name


def _detect_zip(path: Path, size: int) -> Detected:
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            _check_archive_sizes(path, infos, size)
            names = [i.filename for i in infos]
            inner = [_strip_root(n) for n in names]
            if "archive_format" in inner or "archive_format" in names or any(
                n.startswith("models/") and n.endswith(".json") for n in inner
            ) or LEGACY_PROGRAM in names:
                code = [n for n in names if any(m in n for m in PROGRAM_CODE_MEMBERS)]
                return Detected(ModelFormat.EXPORTED_PROGRAM, code_members=code)
            if any(n.startswith("code/") for n in inner) and any(
                n.endswith("constants.pkl") for n in names
            ):
                return Detected(ModelFormat.TORCHSCRIPT)
            pkl = [i for i in infos if i.filename.endswith("data.pkl")]
            if pkl:
                if pkl[0].file_size > MAX_PICKLE_BYTES:
                    raise BadInputError(
                        f"{path}: its data.pkl declares {_mib(pkl[0].file_size)}; a model's is "
                        "a few MiB at most; refusing to read it")
                globals_ = pickle_globals(zf.read(pkl[0]))
                code = names_code(globals_)
                fmt = ModelFormat.PICKLED_MODULE if code else ModelFormat.STATE_DICT
                return Detected(fmt, code)
            if any(n.endswith(".npy") for n in names):
                raise BadInputError(f"{path}: a NumPy .npz archive, not a model (input arrays "
                                    "go to --inputs FILE.npz)")
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as exc:
        raise BadInputError(f"{path}: corrupt or truncated archive ({exc})") from exc
    raise BadInputError(
        f"{path}: a zip archive, but not one torch.save, torch.jit.save or torch.export.save wrote"
    )


def _probe_onnx(path: Path, size: int, head: bytes) -> str | None:
    """None if `path` parses as an ONNX model with a graph; else why it is not one."""
    from export_gelu.onnx_file import read_structure

    if size > MAX_ONNX_PROTO_BYTES:
        return (f"{_mib(size)} of unrecognised content; an ONNX file cannot exceed 2 GiB "
                "(large models keep weights in external data)")
    try:
        model = read_structure(path)
    except Exception:  # noqa: BLE001 - protobuf raises DecodeError and others on garbage
        if head[:1] == b"\x08":  # field 1 (ir_version), varint: how every ONNX file starts
            return "starts like an ONNX file but does not parse: truncated or corrupt"
        return f"not a PyTorch or ONNX model (unrecognised content, first bytes {head[:4]!r})"
    if model.ir_version <= 0 or not model.HasField("graph"):
        return f"not a PyTorch or ONNX model (unrecognised content, first bytes {head[:4]!r})"
    if len(model.graph.node) == 0:
        return "an ONNX file whose graph has no nodes: nothing to export"
    return None


#: A safetensors header larger than this is not one (the format caps it at 100 MB).
MAX_SAFETENSORS_HEADER = 100_000_000


def is_safetensors(path: Path, size: int) -> bool:
    """A safetensors file: a little-endian u64 header length N, then N bytes of JSON that
    open with `{` and name each tensor's dtype, shape and offsets."""
    from export_gelu.bounded_json import MAX_DEPTH, nesting_depth, parse_json

    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return False
        length = int.from_bytes(head, "little")
        if not 2 <= length <= min(MAX_SAFETENSORS_HEADER, size - 8):
            return False
        text = fh.read(length)
    if not text.startswith(b"{"):
        return False
    try:
        header = parse_json(text, f"{path} (its safetensors header)",
                            max_bytes=MAX_SAFETENSORS_HEADER)
    except BadInputError:
        if nesting_depth(text) > MAX_DEPTH:
            raise
        return False
    return isinstance(header, dict) and all(
        k == "__metadata__" or (isinstance(v, dict) and "dtype" in v) for k, v in header.items())


def refuse_missing(path: str | Path) -> None:
    """Exit 2 when nothing is at `path` (before any progress line says it is being loaded)."""
    if not Path(path).exists():
        raise BadInputError(f"{path}: no such file")


def detect_format(path: str | Path) -> Detected:
    """Detect a model file's format from its bytes; raise BadInputError with a reason if none."""
    path = Path(path)
    if not path.exists():
        raise BadInputError(f"{path}: no such file")
    if path.is_dir():
        raise BadInputError(f"{path}: is a directory, not a model file (a Hugging Face "
                            "save_pretrained folder holds a config.json)")
    if not path.is_file():
        raise BadInputError(f"{path}: not a regular file")
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    if size == 0:
        raise BadInputError(f"{path}: the file is empty")
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06") or \
            zipfile.is_zipfile(path):
        return _detect_zip(path, size)
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        # Legacy (pre-1.6) torch.save: magic, protocol, sys info, then the object, each a pickle.
        with path.open("rb") as fh:
            data = fh.read(LEGACY_SCAN_BYTES)
        return Detected(ModelFormat.PICKLED_MODULE, names_code(pickle_globals(data, 4)))
    if is_safetensors(path, size):
        return Detected(ModelFormat.SAFETENSORS)
    why_not = _probe_onnx(path, size, head)
    if why_not is None:
        return Detected(ModelFormat.ONNX)
    raise BadInputError(f"{path}: {why_not}")
