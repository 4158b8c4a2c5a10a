"""Which task a Hugging Face folder is exported for, and which transformers class loads it.

Task names are optimum's (`optimum-cli export onnx --task`), so a user's command line carries
over. Each task names the transformers auto-class mappings (`MODEL_FOR_*_MAPPING_NAMES` in
transformers/models/auto/modeling_auto.py) whose classes serve it, and the kind of export it
makes: one graph (`single`), a decoder-only generation graph with past key/values
(`decoder`), or an encoder–decoder's graphs (`seq2seq`). Without `--task`, the task is the
first whose mappings hold the class `config.json`'s `architectures` names, checked
generation tasks first, then heads, bare models (feature-extraction) last; a generation class
defaults to its `-with-past` task, as optimum's `main_export` does for `--task auto`. A class
no mapping holds is exported with its own outputs (as feature-extraction).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from export_gelu.errors import BadInputError

SINGLE, DECODER, SEQ2SEQ = "single", "decoder", "seq2seq"
WITH_PAST = "-with-past"
#: An encoder–decoder's graph files, as optimum names them (the last only with past).
ENCODER_FILE, DECODER_FILE = "encoder_model.onnx", "decoder_model.onnx"
DECODER_WITH_PAST_FILE = "decoder_with_past_model.onnx"


@dataclass(frozen=True)
class Task:
    """One task: its name, the auto mappings whose classes serve it, the kind of export."""

    name: str
    mappings: tuple[str, ...]  # MODEL_FOR_*_MAPPING_NAMES, in order of preference
    kind: str = SINGLE
    #: serves only encoder-decoder configs (the image-text mapping also holds decoder-only
    #: multimodal LMs, which are not an encoder and a decoder)
    encoder_decoder: bool = False


#: Generation first, then heads, the bare model last: the first task whose mappings hold the
#: architecture's class wins (BartForConditionalGeneration is in both the masked-LM and the
#: seq2seq mapping: it is a text2text-generation model).
TASKS: tuple[Task, ...] = (
    Task("text2text-generation", ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",), SEQ2SEQ),
    Task("automatic-speech-recognition", ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
                                          "MODEL_FOR_CTC_MAPPING_NAMES"), SEQ2SEQ),
    Task("image-to-text", ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",), SEQ2SEQ,
         encoder_decoder=True),
    Task("text-generation", ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",), DECODER),
    Task("fill-mask", ("MODEL_FOR_MASKED_LM_MAPPING_NAMES",)),
    Task("text-classification", ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",)),
    Task("token-classification", ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",)),
    Task("question-answering", ("MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",)),
    Task("multiple-choice", ("MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",)),
    Task("image-classification", ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",)),
    Task("zero-shot-image-classification",
         ("MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",)),
    Task("audio-classification", ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",)),
    Task("audio-frame-classification", ("MODEL_FOR_AUDIO_FRAME_CLASSIFICATION_MAPPING_NAMES",)),
    Task("semantic-segmentation", ("MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",)),
    Task("depth-estimation", ("MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",)),
    Task("masked-im", ("MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES",)),
    Task("feature-extraction", ("MODEL_MAPPING_NAMES",)),
)
_BY_NAME = {t.name: t for t in TASKS}
#: optimum's older task names (TasksManager's synonyms) → the names above.
SYNONYMS = {"default": "feature-extraction", "masked-lm": "fill-mask",
            "sequence-classification": "text-classification", "causal-lm": "text-generation",
            "seq2seq-lm": "text2text-generation", "speech2seq-lm": "automatic-speech-recognition",
            "summarization": "text2text-generation", "translation": "text2text-generation",
            "text-to-text": "text2text-generation"}


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


def task_names() -> list[str]:
    """Every task `--task` takes (the `-with-past` forms of generation tasks included)."""
    names = []
    for t in TASKS:
        names.append(t.name)
        if t.kind != SINGLE:
            names.append(t.name + WITH_PAST)
    return names


def _mapping(name: str) -> Mapping[str, Any]:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, name, {}) or {}


def _classes(value: Any) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else (str(value),)


def class_for(task: Task, model_type: str) -> str | None:
    """The class a task's mappings give a model type (None: the task does not serve it)."""
    for mapping in task.mappings:
        found = _mapping(mapping).get(model_type)
        if found:
            return _classes(found)[0]
    return None


def _task_of_class(class_name: str, config: Any = None) -> Task | None:
    composite = bool(getattr(config, "is_encoder_decoder", False))
    for task in TASKS:
        if task.encoder_decoder and not composite:
            continue
        for mapping in task.mappings:
            if any(class_name in _classes(v) for v in _mapping(mapping).values()):
                return task
    return None


def task_by_name(given: str) -> tuple[Task, bool]:
    """`--task NAME` → (the task, whether it is the `-with-past` one); exit 2 naming the tasks
    when it is none (options.validate asks before any work)."""
    base = SYNONYMS.get(given, given)
    with_past = base.endswith(WITH_PAST)
    base = base[: -len(WITH_PAST)] if with_past else base
    task = _BY_NAME.get(base)
    if task is None or (with_past and task.kind == SINGLE):
        raise BadInputError(f"--task {given!r}: not a task export-gelu knows; choose one of "
                            f"{', '.join(task_names())}")
    return task, with_past


def resolve_task(config: Any, given: str | None, folder: Any) -> ResolvedTask:
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
        return ResolvedTask(_BY_NAME["feature-extraction"].name, _BY_NAME["feature-extraction"],
                            archs[0], False, inferred=True)
    with_past = found.kind != SINGLE and not archs[0].endswith("ForCTC")
    name = found.name + (WITH_PAST if with_past else "")
    return ResolvedTask(name, found, archs[0], with_past, inferred=True)
