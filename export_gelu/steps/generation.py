"""The generation check of with-past graphs: greedy decoding in ONNX Runtime against
transformers' generate (check/greedy_decode.py); tokens that differ fail the run (exit 1) when
the graphs compute the model's own math."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from export_gelu.check import greedy_decode as gd
from export_gelu.exporter.hf.inputs import start_token
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.run import Run
from export_gelu.steps.check import BF16_NOT_RUN, no_kernel, ort_missing


def _prompt(loaded: LoadedModel) -> dict[str, np.ndarray]:
    """The first row of the example inputs (batch 1), as numpy."""
    return {n: t[:1].detach().cpu().numpy() for n, t in
            zip(loaded.input_names, loaded.example_inputs or ())}


def judged(gelu: str, run_precision: str) -> bool:
    """Tokens must agree when the graphs compute the model's own math in float32."""
    return gelu == "keep" and run_precision in ("fp32", "fp64")


def decode_and_compare(model: LoadedModel, graphs: dict[str, Path], first: LoadedModel, *,
                       gelu: str, run_precision: str, threads: int, run: Run
                       ) -> gd.DecodeResult:
    """Greedy decoding with `graphs` (role → file: `decoder_with_past`, or `encoder` and
    the decoders), prompted with `first`'s example inputs, against `model`'s generate."""
    fm = model.generation
    assert fm is not None, "called only for a with-past folder model (its generation)"
    missing = ort_missing()
    if missing:
        return gd.DecodeResult("skipped", reason=missing)
    if fm.model is None:
        return gd.DecodeResult("skipped", reason="the model was freed")
    if run_precision == "bf16":
        return gd.DecodeResult("skipped", reason=BF16_NOT_RUN)
    run.say(f"greedy decoding {gd.STEPS} tokens in ONNX Runtime and with generate")
    prompt = _prompt(first)
    seq2seq = "encoder" in graphs
    if not seq2seq:  # a decoder, prompted with 4 of the example's tokens
        prompt = {"input_ids": prompt["input_ids"][:, :4]}
    try:
        deployed = (gd.seq2seq_tokens(graphs, prompt, start_token(fm.config), threads=threads)
                    if seq2seq else gd.decoder_tokens(graphs["decoder_with_past"],
                                                      prompt["input_ids"], threads=threads))
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime lacks a kernel: not run, said why
        lacking = no_kernel(exc)
        if lacking is None:
            raise
        return gd.DecodeResult("skipped", reason=lacking)
    reference = gd.generate_tokens(fm.model, gd.torch_inputs(prompt))
    result = gd.compare(reference, deployed, judged(gelu, run_precision))
    if result.status == "differs":
        run.note(f"greedy decoding differs from generate ({result.reason}); not judged: "
                 f"--gelu {gelu} / {run_precision} changes the math", "generation-differs")
    return result
