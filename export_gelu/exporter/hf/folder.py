"""A Hugging Face `save_pretrained` folder as a model: its config, its weights (safetensors,
sharded or not; a pickled `.bin` only when pickles are allowed), the class its task needs.

Nothing in the folder runs as code unless pickles are allowed: a config whose `auto_map`
names the folder's own Python modules (`trust_remote_code`) and `pytorch_model.bin` weights
(a pickle) are refused otherwise. Every file a load reads (the folder's own, the shards an
index names) must resolve inside the model's root (exporter/model_files/model_reads.py).
The model is built in float32 with eager attention (every opset and TensorRT version takes
its math; `--precision` casts afterwards), in eval mode.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from export_gelu.bounded_json import read_json
from export_gelu.errors import BadInputError
from export_gelu.exporter.hf.processor import check_processor
from export_gelu.exporter.hf.tasks import ResolvedTask, resolve_task
from export_gelu.exporter.model_files.model_reads import contained, model_root
from export_gelu.notes import Note

if TYPE_CHECKING:
    from types import ModuleType

    import torch

    from export_gelu.exporter.inputs.specs import InputSpec

HF_EXTRA = "pip install 'export-gelu[hf]'"
CONFIG = "config.json"
SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
PICKLED, PICKLED_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
PICKLE_WEIGHTS_RISK = ("its weights are a pickle (pytorch_model.bin): loading it can run code "
                       "from the file; pass --allow-pickle only if you trust where it came from, "
                       "or save the model with save_pretrained(..., safe_serialization=True)")


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' progress bars, info logs and warnings off for the span (the run's own
    progress and notes say what happened)."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def is_hf_folder(path: Path) -> bool:
    """A folder holding a `config.json`: what `save_pretrained` writes (transformers' or
    diffusers')."""
    return path.is_dir() and (path / CONFIG).is_file()


def is_diffusers_config(raw: object) -> bool:
    """config.json as diffusers writes it: `_class_name` and no transformers `model_type`."""
    return isinstance(raw, dict) and isinstance(raw.get("_class_name"), str) \
        and "model_type" not in raw


def is_diffusers_folder(folder: Path) -> bool:
    """A diffusers save_pretrained folder (hf/diffusers_folder.py)."""
    try:
        return is_diffusers_config(read_json(folder / CONFIG))
    except (BadInputError, OSError):
        return False


def require_transformers(folder: Path) -> ModuleType:
    """The transformers module, or exit 2 saying how to install it."""
    try:
        import transformers
    except ImportError as exc:
        raise BadInputError(f"{folder}: a Hugging Face folder needs transformers, which is not "
                            f"installed here ({HF_EXTRA})") from exc
    return transformers


@dataclass
class Weights:
    """The weight files a folder holds, as save_pretrained names them."""

    files: list[Path] = field(default_factory=list)
    safetensors: bool = True
    index: Path | None = None


def _shards(folder: Path, index: Path) -> list[Path]:
    """The shard files an index names, each inside the model's root (model_reads) and
    present, symlinks resolved."""
    doc = read_json(index)
    try:
        names = sorted(set(doc["weight_map"].values()))
    except (KeyError, TypeError, AttributeError) as exc:
        raise BadInputError(f"{index}: not a weight index save_pretrained writes "
                            f"({type(exc).__name__})") from exc
    base = folder.resolve()
    root = model_root(folder)
    found = []
    for name in names:
        shard = contained(root, base, str(name), index, "shard")
        if not shard.is_file():
            raise BadInputError(f"{index}: shard {name!r} is missing (copy every shard with "
                                "the index)")
        found.append(shard)
    return found


def folder_reads(folder: Path) -> list[Path]:
    """Every file a load of `folder` may read, resolved: each entry of the folder (whatever
    its name: transformers looks for files by name) and each shard a weight index names.
    Exit 2 when one resolves outside the model's root (model_reads: the containment rule),
    before anything of the folder is read."""
    base = folder.resolve()
    root = model_root(folder)
    found: list[Path] = []
    try:
        entries = sorted(base.iterdir())
    except OSError as exc:
        raise BadInputError(f"{folder}: cannot list it ({exc.strerror or exc})") from exc
    for entry in entries:
        target = contained(root, base, entry.name, folder, "its file")
        if target.is_file() and target not in found:
            found.append(target)
    for index in (SAFETENSORS_INDEX, PICKLED_INDEX):
        if (base / index).is_file():
            found += [s for s in _shards(folder, base / index) if s not in found]
    return found


def find_weights(folder: Path, allow_pickle: bool) -> Weights:
    """The folder's weights: safetensors first (one file or an index and its shards); a `.bin`
    only with `allow_pickle`. Exit 2 when there are none, or only pickled ones."""
    for single, index, safe in ((SAFETENSORS, SAFETENSORS_INDEX, True),
                                (PICKLED, PICKLED_INDEX, False)):
        if (folder / index).is_file():
            found = Weights(_shards(folder, folder / index), safe, folder / index)
        elif (folder / single).is_file():
            found = Weights([folder / single], safe)
        else:
            continue
        if not safe and not allow_pickle:
            raise BadInputError(f"{folder}: {PICKLE_WEIGHTS_RISK}")
        return found
    raise BadInputError(f"{folder}: holds {CONFIG} but no weights ({SAFETENSORS}, "
                        f"{SAFETENSORS_INDEX} with its shards, or {PICKLED})")


def read_config(folder: Path, allow_pickle: bool) -> object:
    """The folder's config through transformers' AutoConfig; custom code only when allowed."""
    transformers = require_transformers(folder)
    raw = read_json(folder / CONFIG)
    if not isinstance(raw, dict):
        raise BadInputError(f"{folder / CONFIG}: holds a {type(raw).__name__}, not a config")
    if raw.get("auto_map") and not allow_pickle:
        raise BadInputError(f"{folder}: config.json's auto_map names Python code in the folder "
                            "(trust_remote_code); loading it runs that code; pass "
                            "--allow-pickle only if you trust where it came from")
    try:
        with quiet_transformers():
            return transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True,
                                                           trust_remote_code=allow_pickle)
    except Exception as exc:  # noqa: BLE001 - transformers raises ValueError, KeyError, OSError
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInputError(f"{folder / CONFIG}: transformers cannot read it ({first})") from exc


def _model_class(transformers: ModuleType, resolved: ResolvedTask, folder: Path) -> Any:
    cls = getattr(transformers, resolved.class_name, None)
    if cls is None:
        raise BadInputError(f"{folder}: transformers {transformers.__version__} has no class "
                            f"{resolved.class_name}")
    return cls


def _from_pretrained(cls: Any, folder: Path, weights: Weights, allow_pickle: bool) -> Any:
    import torch

    kwargs = dict(local_files_only=True, use_safetensors=weights.safetensors,
                  attn_implementation="eager", output_loading_info=True,
                  ignore_mismatched_sizes=True,  # listed in the loading info: _loading_notes
                  trust_remote_code=allow_pickle)
    try:
        return cls.from_pretrained(str(folder), dtype=torch.float32, **kwargs)
    except TypeError as exc:  # transformers before `dtype=` took torch_dtype=
        if "dtype" not in str(exc):
            raise
        return cls.from_pretrained(str(folder), torch_dtype=torch.float32, **kwargs)


@dataclass
class FolderModel:
    """A folder loaded: its task, the transformers model (eval, float32), notes for the report."""

    folder: Path
    task: ResolvedTask
    model: torch.nn.Module
    config: object  # a transformers config, a diffusers model's (a FrozenDict)
    weights: Weights
    notes: list[str] = field(default_factory=list)
    preprocessor: dict[str, object] = field(default_factory=dict)
    #: the inputs to make, when the loader sized them itself (a diffusers model's)
    requests: list[InputSpec] | None = None


def _preprocessor(folder: Path) -> dict[str, object]:
    """preprocessor_config.json (image sizes, sampling rate, feature size), when the folder has
    one, read as every file of the folder is (contained in it, bounded)."""
    name = "preprocessor_config.json"
    if not (folder / name).is_file():
        return {}
    path = contained(model_root(folder), folder, name, folder, "its file")
    data = read_json(path)
    return check_processor(data, folder / name) if isinstance(data, dict) else {}


def _loading_notes(info: object, folder: Path) -> list[str]:
    """What from_pretrained could not fill from the folder: refused when nothing fits."""
    if not isinstance(info, dict):
        return []
    missing = sorted(info.get("missing_keys") or ())
    mismatched = list(info.get("mismatched_keys") or ())
    if mismatched:
        first = mismatched[0][0] if isinstance(mismatched[0], (list, tuple)) else mismatched[0]
        raise BadInputError(f"{folder}: weight {first!r} has another shape than the config "
                            "gives it")
    if not missing:
        return []
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return [Note(f"weights not in the folder, initialised at random by transformers: {shown} "
                 "(the task's head is new: export the task the folder was trained for)",
                 "hf-new-weights")]


#: Sentences of transformers' and torch's errors that point at a report or warnings printed
#: before them (export-gelu silences those): replaced by what the error means.
_POINTS_ABOVE = re.compile(r"(look at the above report|check the warnings above|see above|"
                           r"printed above)", re.I)


def _own_words(exc: BaseException) -> str:
    """The first line of `exc`, unless it only points at a report printed above (which the
    run silenced): then what it means, in our words."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if _POINTS_ABOVE.search(first):
        return ("the folder's weights do not fit its config.json: a weight's shape or dtype "
                "differs from what the config gives it")
    return first


def load_folder(folder: Path, task: str | None = None, allow_pickle: bool = False
                ) -> FolderModel:
    """Load a save_pretrained folder for `task` (optimum's names; None: from architectures)."""
    transformers = require_transformers(folder)
    folder_reads(folder)  # nothing outside the model's root is read
    config = read_config(folder, allow_pickle)
    resolved = resolve_task(config, task, folder)
    weights = find_weights(folder, allow_pickle)
    cls = _model_class(transformers, resolved, folder)
    try:
        with quiet_transformers():
            model, info = _from_pretrained(cls, folder, weights, allow_pickle)
    except BadInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - corrupt weights, a config the class refuses
        raise BadInputError(f"{folder}: {resolved.class_name}.from_pretrained failed "
                            f"({type(exc).__name__}: {_own_words(exc)})") from exc
    model.eval()
    how = "inferred from config.json's architectures" if resolved.inferred else "--task"
    shards = f", {len(weights.files)} shards" if weights.index else ""
    notes: list[str] = [Note(f"Hugging Face folder: task {resolved.name} ({how}), class "
                  f"{resolved.class_name}, weights from "
                  f"{'safetensors' if weights.safetensors else 'a pickle'}{shards}", "hf-folder")]
    notes += _loading_notes(info, folder)
    return FolderModel(folder, resolved, model, config, weights, notes, _preprocessor(folder))


def folder_task(folder: Path, task: str | None, allow_pickle: bool) -> ResolvedTask | None:
    """The task a load of `folder` resolves, from config.json alone, after the checks
    load_folder makes first (None: a diffusers folder): a command that cannot take the task
    refuses it before anything is built."""
    if is_diffusers_folder(folder):
        return None
    require_transformers(folder)
    folder_reads(folder)
    return resolve_task(read_config(folder, allow_pickle), task, folder)


def planned_files(folder: Path, task: str | None, allow_pickle: bool) -> list[str]:
    """The graph files an export of the folder writes into its output folder ([]: one graph,
    written to one file). Reads config.json only: checked before any work."""
    if is_diffusers_folder(folder):
        return []
    return resolve_task(read_config(folder, allow_pickle), task, folder).graph_files
