"""How many bytes a model's weights take, and whether the output's disk can hold them."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from export_gelu.errors import BadInputError
from export_gelu.exporter.saving.save import external_data_threshold

if TYPE_CHECKING:
    import torch

#: Room kept free beyond the estimate (the graph, the report, filesystem slack).
DISK_MARGIN = 64 << 20
#: Weights (bytes) up to which a second copy may be held in memory to save a capture (a
#: comparison's shared program, a folder graph's cast copy probed at fp16/bf16).
COPY_LIMIT_BYTES = 1 << 30


def module_weight_bytes(module: torch.nn.Module) -> int:
    """Bytes of a torch module's parameters and buffers, each storage counted once."""
    return tensors_bytes(module.state_dict().values())


def tensors_bytes(tensors: Iterable[object]) -> int:
    """Bytes of the tensors among `tensors`, each storage counted once (other values: 0)."""
    import torch

    seen: set[int] = set()
    total = 0
    for tensor in tensors:
        if not isinstance(tensor, torch.Tensor):
            continue
        try:
            key = tensor.untyped_storage().data_ptr()
        except (AttributeError, RuntimeError):
            key = id(tensor)
        if key in seen:
            continue
        seen.add(key)
        total += tensor.numel() * tensor.element_size()
    return total


def file_bytes(paths: Iterable[Path]) -> int:
    return sum(Path(p).stat().st_size for p in paths)


def check_disk_space(folder: Path, needed: int, what: str) -> None:
    """Exit 2 before any work when `folder`'s filesystem cannot take `needed` more bytes."""
    free = shutil.disk_usage(folder).free
    if needed + DISK_MARGIN > free:
        raise BadInputError(f"not enough disk space in {folder}: {what} needs about "
                            f"{needed / 1e9:.1f} GB, {free / 1e9:.1f} GB free")


def check_disk_for(loaded: Any, out: Path) -> None:
    """Exit 2 before any work when the output's disk cannot take the weights (twice for a
    big torch model: the exporter's copy, then the output's). `loaded`: a LoadedModel."""
    if loaded.is_onnx:
        needed, what = file_bytes([loaded.path, *loaded.data_files]), "the rewritten model"
    else:
        if loaded.module is not None:
            size = module_weight_bytes(loaded.module)
        elif loaded.path.is_file():  # an ExportedProgram: its file is its weights
            size = file_bytes([loaded.path])
        else:  # an ExportedProgram in memory
            size = sum(t.numel() * t.element_size() for t in loaded.exported.state_dict.values())
        big = size > external_data_threshold()
        needed = 2 * size if big else size
        what = ("the export (weights written once by the exporter, once into the output)"
                if big else "the export")
    check_disk_space(out.parent, needed, what)
