"""Which task a Hugging Face folder is exported for, and which transformers class loads it.

Task names are optimum's (`optimum-cli export onnx --task`), so a user's command line carries
over; the table of tasks (what `--task` takes: each with the transformers auto-class mappings
whose classes serve it and the kind of export it makes) is export_gelu/flags/tasks.py.
Without `--task`, the task is the first whose mappings hold the class `config.json`'s
`architectures` names, checked generation tasks first, then heads, bare models
(feature-extraction) last; a generation class defaults to its `-with-past` task, as optimum's
`main_export` does for `--task auto`. A class no mapping holds is exported with its own
outputs (as feature-extraction).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from export_gelu.errors import BadInputError
from export_gelu.flags.tasks import (  # noqa: F401 - the task names, re-exported
    BY_NAME,
    DECODER,
    SEQ2SEQ,
    SINGLE,
    TASKS,
    WITH_PAST,
    Task,
    task_by_name,
    task_names,
)

#: An encoder–decoder's graph files, as optimum names them (the last only with past).
ENCODER_FILE, DECODER_FILE = "encoder_model.onnx", "decoder_model.onnx"
DECODER_WITH_PAST_FILE = "decoder_with_past_model.onnx"


@dataclass(frozen=True)
class ResolvedTask:
    """The task a run exports: its name as given or inferred, the class that loads it."""

    name: str  # e.g. text-generation-with-past
    task: Task
    class_name: str  # the transformers class, e.g. GPT2LMHeadModel
    with_past: bool
    inferred: bool  # from config.json's architectures (no --task)

    @property
    def graph_files(self) -> list[str]:
        """The files a multi-graph export writes into its output folder ([]: one graph)."""
        if self.kind != SEQ2SEQ:
            return []
        return [ENCODER_FILE, DECODER_FILE] + ([DECODER_WITH_PAST_FILE] if self.with_past else [])

    @property
    def kind(self) -> str:
        """single | decoder | seq2seq; a CTC speech model is one graph."""
        if self.task.kind == SEQ2SEQ and self.class_name.endswith("ForCTC"):
            return SINGLE
        return self.task.kind


def _mapping(name: str) -> Mapping[str, object]:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, name, {}) or {}


def _classes(value: object) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else (str(value),)


def class_for(task: Task, model_type: str) -> str | None:
    """The class a task's mappings give a model type (None: the task does not serve it)."""
    for mapping in task.mappings:
        found = _mapping(mapping).get(model_type)
        if found:
            return _classes(found)[0]
    return None


def _task_of_class(class_name: str, config: object = None) -> Task | None:
    composite = bool(getattr(config, "is_encoder_decoder", False))
    for task in TASKS:
        if task.encoder_decoder and not composite:
            continue
        for mapping in task.mappings:
            if any(class_name in _classes(v) for v in _mapping(mapping).values()):
                return task
    return None


def resolve_task(config: object, given: str | None, folder: Path) -> ResolvedTask:
    """The task for a folder's config: `given` (optimum's name, `--task`), else the task of
    `config.architectures[0]`. Exit 2 naming the tasks when neither works."""
    model_type = getattr(config, "model_type", "") or ""
    archs = list(getattr(config, "architectures", None) or [])
    if given:
        task, with_past = task_by_name(given)
        base = task.name
        cls = (archs[0] if archs and _task_of_class(archs[0], config) is task else
               class_for(task, model_type))
        if cls is None:
            raise BadInputError(f"{folder}: transformers has no {given} class for model type "
                                f"{model_type!r}")
        if task.encoder_decoder and not getattr(config, "is_encoder_decoder", False):
            raise BadInputError(f"--task {given!r}: {cls} is not an encoder-decoder model; "
                                "use --task feature-extraction")
        if with_past and cls.endswith("ForCTC"):
            raise BadInputError(f"--task {given!r}: {cls} is a CTC model (one graph, no "
                                f"decoder); use --task {base}")
        return ResolvedTask(given, task, cls, with_past, inferred=False)
    if not archs:
        raise BadInputError(f"{folder}/config.json names no architectures; pass --task (one of "
                            f"{', '.join(task_names())})")
    found = _task_of_class(archs[0], config)
    if found is None:  # a class no task mapping holds (ElectraForPreTraining): its own outputs
        import transformers

        if getattr(transformers, archs[0], None) is None:
            raise BadInputError(f"{folder}: {archs[0]} (config.json's architectures) is not a "
                                "transformers class; pass --task")
        return ResolvedTask(BY_NAME["feature-extraction"].name, BY_NAME["feature-extraction"],
                            archs[0], False, inferred=True)
    with_past = found.kind != SINGLE and not archs[0].endswith("ForCTC")
    name = found.name + (WITH_PAST if with_past else "")
    return ResolvedTask(name, found, archs[0], with_past, inferred=True)
