"""A diffusers `save_pretrained` folder of one model (a UNet2DConditionModel, SD3's
SD3Transformer2DModel, …): `config.json` names its class in `_class_name`, the weights are
`diffusion_pytorch_model.safetensors` (or an index and its shards).

The class must be a diffusers model (`ModelMixin`), never a pipeline; the weights are read
from safetensors (a pickled `.bin` only with `--allow-pickle`), every file inside the folder
(the same containment rule as a transformers folder). The example inputs come from the
config, as a diffusion pipeline makes them for its denoiser:

- `sample` / `hidden_states` (the latents): batch × `in_channels` × `sample_size`²;
- `timestep`: batch values, uniform in [0, 1000);
- `encoder_hidden_states` (a prompt's embeddings): batch × 16 × the width the config gives
  (`encoder_hid_dim` when set, else `cross_attention_dim` for a UNet, `joint_attention_dim`
  for SD3);
- `pooled_projections` (SD3): batch × `pooled_projection_dim`.

A forward() input without a default that the config cannot size (SDXL's
`added_cond_kwargs`, a class-conditioned UNet's `class_labels`) is refused with the way out:
save the model with torch.export, or call the API with its inputs.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from export_gelu.bounded_json import read_json
from export_gelu.errors import BadInputError
from export_gelu.exporter.hf import inputs as hi
from export_gelu.exporter.hf.folder import (
    CONFIG,
    FolderModel,
    Weights,
    _shards,
    folder_reads,
    quiet_transformers,
)
from export_gelu.exporter.hf.folder import is_diffusers_config as is_diffusers_config
from export_gelu.exporter.hf.folder import is_diffusers_folder as is_diffusers_folder
from export_gelu.exporter.hf.tasks import SINGLE, ResolvedTask, Task
from export_gelu.notes import Note

if TYPE_CHECKING:
    import torch

DIFFUSERS_EXTRA = "pip install diffusers"
WEIGHTS, WEIGHTS_INDEX = ("diffusion_pytorch_model.safetensors",
                          "diffusion_pytorch_model.safetensors.index.json")
PICKLED, PICKLED_INDEX = "diffusion_pytorch_model.bin", "diffusion_pytorch_model.bin.index.json"
#: The one task a diffusers model is exported for: its denoiser's step, one graph.
TASK = Task("text-to-image", (), SINGLE)
TEXT_TOKENS = 16  # encoder_hidden_states' length (a prompt's embeddings)
LATENTS = ("sample", "hidden_states")


def _require_diffusers(folder: Path) -> ModuleType:
    try:
        import diffusers
    except ImportError as exc:
        raise BadInputError(f"{folder}: a diffusers folder (config.json names _class_name) "
                            f"needs diffusers, which is not installed here "
                            f"({DIFFUSERS_EXTRA})") from exc
    return diffusers


def _weights(folder: Path, allow_pickle: bool) -> Weights:
    for single, index, safe in ((WEIGHTS, WEIGHTS_INDEX, True), (PICKLED, PICKLED_INDEX, False)):
        if (folder / index).is_file():
            found = Weights(_shards(folder, folder / index), safe, folder / index)
        elif (folder / single).is_file():
            found = Weights([folder / single], safe)
        else:
            continue
        if not safe and not allow_pickle:
            raise BadInputError(f"{folder}: its weights are a pickle ({PICKLED}): loading it "
                                "can run code from the file; pass --allow-pickle only if you "
                                "trust where it came from, or save it with safetensors")
        return found
    raise BadInputError(f"{folder}: holds a diffusers config.json but no weights ({WEIGHTS}, "
                        f"{WEIGHTS_INDEX} with its shards, or {PICKLED})")


@contextlib.contextmanager
def _quiet_diffusers(diffusers: ModuleType) -> Iterator[None]:
    """diffusers' own logger at errors only for the span (the run's notes say what matters)."""
    logging = diffusers.utils.logging
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def _model_class(diffusers: ModuleType, name: str, folder: Path) -> Any:
    cls = getattr(diffusers, name, None)
    if not (isinstance(cls, type) and issubclass(cls, diffusers.ModelMixin)):
        what = "a pipeline" if isinstance(cls, type) else "no class"
        raise BadInputError(f"{folder}: config.json's _class_name {name!r} is {what} of "
                            f"diffusers {diffusers.__version__}, not a model; export the "
                            "folder of one model (a pipeline's unet/ or transformer/)")
    return cls


def load_diffusers_folder(folder: Path, task: str | None, allow_pickle: bool) -> FolderModel:
    """A diffusers model folder: the model (float32, eval) and the inputs its config sizes."""
    import torch

    diffusers = _require_diffusers(folder)
    folder_reads(folder)  # nothing outside the model's root is read
    raw = read_json(folder / CONFIG)
    if task and task != TASK.name:
        raise BadInputError(f"--task {task!r}: a diffusers model folder is exported as its "
                            f"one denoising step ({TASK.name}); drop --task")
    cls = _model_class(diffusers, raw["_class_name"], folder)
    weights = _weights(folder, allow_pickle)
    try:
        with quiet_transformers(), _quiet_diffusers(diffusers):
            model = cls.from_pretrained(str(folder), torch_dtype=torch.float32,
                                        use_safetensors=weights.safetensors,
                                        local_files_only=True, low_cpu_mem_usage=False)
    except Exception as exc:  # noqa: BLE001 - a config the class refuses, corrupt weights
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInputError(f"{folder}: {cls.__name__}.from_pretrained failed "
                            f"({type(exc).__name__}: {first})") from exc
    model.eval()
    resolved = ResolvedTask(TASK.name, TASK, cls.__name__, with_past=False, inferred=True)
    note = Note(f"diffusers folder: class {cls.__name__} (config.json's _class_name), weights "
                f"from {'safetensors' if weights.safetensors else 'a pickle'}, inputs made "
                "from its config (latents, timestep, text embeddings)", "diffusers-folder")
    return FolderModel(folder, resolved, model, model.config, weights, [note],
                       requests=requests(model, folder))


def _first_int(value: object) -> int | None:
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    return int(value) if isinstance(value, int) and not isinstance(value, bool) \
        and value > 0 else None


def _size(config: Mapping[str, object]) -> tuple[int, int]:
    size = config.get("sample_size") or 64
    if isinstance(size, (list, tuple)):
        return int(size[0]), int(size[-1])
    side = int(size) if isinstance(size, (int, float, str)) else 64
    return side, side


def _text_width(config: Mapping[str, object]) -> int | None:
    for key in ("encoder_hid_dim", "cross_attention_dim", "joint_attention_dim"):
        found = _first_int(config.get(key))
        if found:
            return found
    return None


def requests(model: torch.nn.Module, folder: Path) -> list[hi.Request]:
    """The inputs of `model`'s forward() that its config sizes, in forward()'s order; exit 2
    naming an input without a default that it cannot size."""
    config = dict(getattr(model, "config", {}))  # diffusers' FrozenDict
    params = inspect.signature(model.forward).parameters
    height, width = _size(config)
    channels = _first_int(config.get("in_channels")) or 4
    made: dict[str, hi.Request] = {}
    for name in LATENTS:
        if name in params:
            made[name] = hi.Request(name, (hi.BATCH, channels, height, width), hi.FLOAT32)
            break
    if "timestep" in params:
        made["timestep"] = hi.Request("timestep", (hi.BATCH,), hi.FLOAT32, 0.0, 1000.0)
    width_text = _text_width(config)
    if "encoder_hidden_states" in params and width_text:
        made["encoder_hidden_states"] = hi.Request(
            "encoder_hidden_states", (hi.BATCH, TEXT_TOKENS, width_text), hi.FLOAT32)
    pooled = _first_int(config.get("pooled_projection_dim"))
    if "pooled_projections" in params and pooled:
        made["pooled_projections"] = hi.Request("pooled_projections", (hi.BATCH, pooled),
                                                hi.FLOAT32)
    unsized = [n for n, p in params.items() if p.default is p.empty and n not in made
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    extra = [key for key in ("addition_embed_type", "class_embed_type") if config.get(key)]
    if unsized or extra:
        what = ", ".join(unsized + [f"{k}={config[k]!r}" for k in extra])
        raise BadInputError(f"{folder}: {type(model).__name__}'s config does not size every "
                            f"input it needs ({what}); save it with torch.export (.pt2) on "
                            "its real inputs, or export it in memory with "
                            "export_gelu.export(model, kwargs=...)")
    return [made[n] for n in params if n in made]
