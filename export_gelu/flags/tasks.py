"""`--task NAME`: the tasks a Hugging Face folder can be exported for, by optimum's names
(`optimum-cli export onnx --task`), so a user's command line carries over.

Each task names the transformers auto-class mappings (`MODEL_FOR_*_MAPPING_NAMES` in
transformers/models/auto/modeling_auto.py) whose classes serve it, and the kind of export it
makes: one graph (`single`), a decoder-only generation graph with past key/values
(`decoder`), or an encoder–decoder's graphs (`seq2seq`). Which task a folder gets, and which
class loads it, is exporter/hf/tasks.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from export_gelu.errors import BadInputError

SINGLE, DECODER, SEQ2SEQ = "single", "decoder", "seq2seq"
WITH_PAST = "-with-past"


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
BY_NAME = {t.name: t for t in TASKS}
#: optimum's older task names (TasksManager's synonyms) → the names above.
SYNONYMS = {"default": "feature-extraction", "masked-lm": "fill-mask",
            "sequence-classification": "text-classification", "causal-lm": "text-generation",
            "seq2seq-lm": "text2text-generation", "speech2seq-lm": "automatic-speech-recognition",
            "summarization": "text2text-generation", "translation": "text2text-generation",
            "text-to-text": "text2text-generation"}


def task_names() -> list[str]:
    """Every task `--task` takes (the `-with-past` forms of generation tasks included)."""
    names = []
    for t in TASKS:
        names.append(t.name)
        if t.kind != SINGLE:
            names.append(t.name + WITH_PAST)
    return names


def task_by_name(given: str) -> tuple[Task, bool]:
    """`--task NAME` → (the task, whether it is the `-with-past` one); exit 2 naming the tasks
    when it is none (options.validate asks before any work)."""
    base = SYNONYMS.get(given, given)
    with_past = base.endswith(WITH_PAST)
    base = base[: -len(WITH_PAST)] if with_past else base
    task = BY_NAME.get(base)
    if task is None or (with_past and task.kind == SINGLE):
        raise BadInputError(f"--task {given!r}: not a task export-gelu knows; choose one of "
                            f"{', '.join(task_names())}")
    return task, with_past
