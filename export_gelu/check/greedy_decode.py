"""The generation check: a short greedy-decode loop run on the written graphs in ONNX Runtime,
token for token against transformers' `generate` on the same model.

The loop is what a generation runtime does with the graphs: a decoder-only model runs its
one graph on the prompt with an empty past (length 0), then one token a step with the
previous step's `present.*` fed back as `past_key_values.*`; an encoder–decoder runs the
encoder once, `decoder_model` on the start token, then `decoder_with_past_model` a token at
a time. transformers' `generate` runs greedy search (`GenerationMixin.generate`, no model's
own override such as Whisper's language detection) for the same number of new tokens, end of
sequence disabled, so both make exactly `steps` tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.json_value import JsonObject

if TYPE_CHECKING:
    import onnxruntime as ort
    import torch


STEPS = 8


@dataclass
class DecodeResult:
    """Tokens from both loops, and whether they agree."""

    status: str  # passed | failed | skipped
    steps: int = STEPS
    reference: list[int] = field(default_factory=list)  # transformers' generate
    deployed: list[int] = field(default_factory=list)  # the ONNX graphs in ONNX Runtime
    reason: str = ""
    judged: bool = True  # False: reported only (a GELU form or precision that changes math)

    def to_json(self) -> JsonObject:
        return {"status": self.status, "steps": self.steps, "generate": self.reference,
                "onnxruntime": self.deployed, "reason": self.reason, "judged": self.judged}


def _session(path: Path, threads: int) -> ort.InferenceSession:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _run(session: ort.InferenceSession, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One run with the values the graph takes (an input the exporter dropped is left out),
    floats cast to the graph's own float type."""
    feed = {}
    for inp in session.get_inputs():
        value = values[inp.name]
        if inp.type == "tensor(float16)" and value.dtype.kind == "f":
            value = value.astype(np.float16)
        feed[inp.name] = value
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feed)))


def _empty_past(session: ort.InferenceSession) -> dict[str, np.ndarray]:
    """Zero-length past key/values, shaped as the graph declares them (batch 1)."""
    out = {}
    for inp in session.get_inputs():
        if inp.name.startswith("past_key_values"):
            dims = [d if isinstance(d, int) else 0 for d in inp.shape]
            dims[0] = 1
            out[inp.name] = np.zeros(dims, np.float32)
    return out


def _fed_back(outputs: Mapping[str, np.ndarray], part: str = "") -> dict[str, np.ndarray]:
    """present.N[.part].key → past_key_values.N[.part].key."""
    return {"past_key_values" + n[len("present"):]: v for n, v in outputs.items()
            if n.startswith("present") and (not part or f".{part}." in n)}


def _greedy(logits: np.ndarray) -> int:
    return int(np.argmax(logits[0, -1]))


def decoder_tokens(graph: Path, prompt: np.ndarray, steps: int = STEPS, threads: int = 1
                   ) -> list[int]:
    """Greedy tokens from a decoder-only graph with past, starting from an empty past."""
    session = _session(graph, threads)
    past, ids, seen, tokens = _empty_past(session), prompt, 0, []
    for _ in range(steps):
        length = ids.shape[1]
        values = {"input_ids": ids, **past,
                  "attention_mask": np.ones((1, seen + length), np.int64),
                  "position_ids": np.arange(seen, seen + length, dtype=np.int64)[None, :]}
        outputs = _run(session, values)
        tokens.append(_greedy(outputs["logits"]))
        past, seen = _fed_back(outputs), seen + length
        ids = np.array([[tokens[-1]]], np.int64)
    return tokens


def seq2seq_tokens(graphs: Mapping[str, Path], encoder_inputs: Mapping[str, np.ndarray],
                   start: int, steps: int = STEPS, threads: int = 1) -> list[int]:
    """Greedy tokens from encoder_model, decoder_model and decoder_with_past_model."""
    hidden = _run(_session(graphs["encoder"], threads), encoder_inputs)["last_hidden_state"]
    values: dict[str, np.ndarray] = {"encoder_hidden_states": hidden,
                                     "input_ids": np.array([[start]], np.int64)}
    if "attention_mask" in encoder_inputs:
        values["encoder_attention_mask"] = encoder_inputs["attention_mask"]
    first = _run(_session(graphs["decoder"], threads), values)
    tokens = [_greedy(first["logits"])]
    cross = _fed_back(first, "encoder")
    own = _fed_back(first, "decoder")
    with_past = _session(graphs["decoder_with_past"], threads)
    for _ in range(steps - 1):
        values["input_ids"] = np.array([[tokens[-1]]], np.int64)
        outputs = _run(with_past, {**values, **own, **cross})
        tokens.append(_greedy(outputs["logits"]))
        own = _fed_back(outputs, "decoder")
    return tokens


def generate_tokens(model: torch.nn.Module, inputs: Mapping[str, torch.Tensor],
                    steps: int = STEPS) -> list[int]:
    """transformers' greedy search for `steps` new tokens: end of sequence disabled, no forced
    or suppressed tokens (the model's own generation config is set aside for the call, since
    generate fills unset values from it)."""
    import torch
    from transformers import GenerationConfig, GenerationMixin, PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"generate runs a transformers model, not {type(model).__name__}")
    start = getattr(model.config, "decoder_start_token_id", None)
    config = GenerationConfig(max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                              num_beams=1, pad_token_id=0, decoder_start_token_id=start)
    saved = model.generation_config
    model.generation_config = config
    try:
        with torch.no_grad():
            out = GenerationMixin.generate(model, **inputs, generation_config=config)
    finally:
        model.generation_config = saved
    sequences = out.sequences if hasattr(out, "sequences") else out
    return [int(t) for t in sequences[0, -steps:]]


def compare(reference: list[int], deployed: list[int], judged: bool) -> DecodeResult:
    """The verdict: the same tokens in the same order (a first difference is named)."""
    if reference == deployed:
        return DecodeResult("passed", len(reference), reference, deployed, judged=judged)
    step = next((i for i, (a, b) in enumerate(zip(reference, deployed)) if a != b),
                min(len(reference), len(deployed)))
    reason = (f"the ONNX graphs chose token {deployed[step] if step < len(deployed) else '-'} "
              f"at step {step + 1}, generate chose "
              f"{reference[step] if step < len(reference) else '-'}")
    return DecodeResult("failed" if judged else "differs", len(reference), reference, deployed,
                        reason, judged)


def torch_inputs(values: Mapping[str, np.ndarray]) -> OrderedDict[str, torch.Tensor]:
    import torch

    return OrderedDict((n, torch.from_numpy(np.ascontiguousarray(v))) for n, v in values.items())
