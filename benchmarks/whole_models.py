"""Whole models, side by side: BERT-, GPT-2- and ViT-style encoders/decoders at a realistic
width, as `torch.onnx.export` gives them, as ONNX Runtime's transformers optimizer makes
them, and as export-gelu emits them.

    .venv/bin/python -m benchmarks.whole_models [--layers 2] [--rounds N] [--quick]

Each model is built from a transformers config with random weights (hidden 768, 12 heads,
intermediate 3072, `--layers` layers; BERT and GPT-2 on 1×128 tokens, ViT on one 224×224
image = 197 tokens). Graphs: the raw dynamo export at opset 18 (the baseline) and at the
default opset 20; ONNX Runtime's transformers optimizer on the opset-18 export (where it
imports); export-gelu `--target ort` and `--target onnx` from the module and from the
opset-18 file (where `--target onnx` re-spells GELUs as primitives: no `Gelu` op). The target
checked: export-gelu's outputs are never slower than the raw exports or the ORT optimizer's
output beyond noise (upper end of the paired-ratio interval ≤ 1.02).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import (
    Variant,
    Verdict,
    add_run_args,
    compare_variants,
    finish_section,
    load_average,
    ratio_text,
    rounds_for,
)
from benchmarks.graphs import (
    export_gelu_file,
    export_raw,
    ort_optimize,
    save_program,
)

HIDDEN, HEADS, INTERMEDIATE, SEQ, VOCAB = 768, 12, 3072, 128, 1000
NOISE_LIMIT = 1.02
RAW18 = "raw export (dynamo, opset 18)"
RAW20 = "raw export (dynamo, opset 20 = torch default)"
ORT_OPT = "ORT transformers optimizer (on opset 18)"
EG_ORT = "export-gelu --target ort"
EG_ONNX = "export-gelu --target onnx"
EG_ORT18 = "export-gelu --target ort (from the opset-18 .onnx)"
EG_ONNX18 = "export-gelu --target onnx (from the opset-18 .onnx)"


def bert(layers: int) -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    from examples.models import HiddenStates

    cfg = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=layers,
                     num_attention_heads=HEADS, intermediate_size=INTERMEDIATE,
                     max_position_embeddings=512, hidden_act="gelu")
    return HiddenStates(BertModel(cfg, add_pooling_layer=False), "input_ids")


def gpt2(layers: int) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2Model

    from examples.models import HiddenStates

    cfg = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=layers, n_head=HEADS,
                     n_positions=512, activation_function="gelu_new", bos_token_id=0,
                     eos_token_id=0)
    return HiddenStates(GPT2Model(cfg), "input_ids")


def vit(layers: int) -> torch.nn.Module:
    from transformers import ViTConfig, ViTModel

    from examples.models import HiddenStates

    cfg = ViTConfig(hidden_size=HIDDEN, num_hidden_layers=layers, num_attention_heads=HEADS,
                    intermediate_size=INTERMEDIATE, image_size=224, patch_size=16,
                    hidden_act="gelu")
    return HiddenStates(ViTModel(cfg, add_pooling_layer=False), "pixel_values")


@dataclass(frozen=True)
class ModelCase:
    name: str
    build: object  # (layers) -> module
    ort_type: str  # onnxruntime.transformers.optimizer model_type
    gelu: str  # how its MLP writes GELU

    def inputs(self) -> torch.Tensor:
        g = torch.Generator().manual_seed(1)
        if self.name == "ViT":
            return torch.randn(1, 3, 224, 224, generator=g)
        return torch.randint(0, VOCAB, (1, SEQ), generator=g)


CASES = (
    ModelCase("BERT", bert, "bert", "F.gelu (exact)"),
    ModelCase("GPT-2", gpt2, "gpt2", "gelu_new (hand-written tanh formula)"),
    ModelCase("ViT", vit, "vit", "F.gelu (exact)"),
)


def make_variants(case: ModelCase, layers: int, tmp: Path,
                  ) -> tuple[list[Variant], dict[str, np.ndarray]]:
    torch.manual_seed(0)
    module = case.build(layers).eval()  # type: ignore[operator]
    x = case.inputs()
    names = ["x"]
    raw18 = export_raw(module, (x,), tmp / "raw18.onnx", 18, input_names=names)
    raw20 = export_raw(module, (x,), tmp / "raw20.onnx", 20, input_names=names)
    optimized, why = ort_optimize(raw18, tmp / "ort_optimizer.onnx", case.ort_type,
                                  num_heads=HEADS, hidden_size=HIDDEN)
    if optimized is None and case.ort_type != "bert":  # what a user tries next
        optimized, why_bert = ort_optimize(raw18, tmp / "ort_optimizer.onnx", "bert",
                                           num_heads=HEADS, hidden_size=HIDDEN)
        why = f"{why}; then {why_bert}"
    program = save_program(module, (x,), tmp / "module.pt")
    variants = [Variant(RAW18, raw18), Variant(RAW20, raw20),
                Variant(ORT_OPT, optimized, why),
                Variant(EG_ORT, export_gelu_file(program, tmp / "eg_ort.onnx", "ort")),
                Variant(EG_ONNX, export_gelu_file(program, tmp / "eg_onnx.onnx", "onnx")),
                Variant(EG_ORT18, export_gelu_file(raw18, tmp / "eg_ort18.onnx", "ort")),
                Variant(EG_ONNX18, export_gelu_file(raw18, tmp / "eg_onnx18.onnx", "onnx"))]
    return variants, {"x": x.numpy()}


def verdicts(name: str, comp) -> list[Verdict]:  # noqa: ANN001 - a harness.Comparison
    """export-gelu's rows against every other row: upper end of the interval ≤ 1.02."""
    labels = [t.label for t in comp]
    out = []
    for mine in (EG_ORT, EG_ONNX, EG_ORT18, EG_ONNX18):
        if mine not in labels:
            continue
        worst = []
        for other in (RAW18, RAW20, ORT_OPT):
            if other in labels:
                r, lo, hi = comp.paired(mine, other)
                each = [run.paired(mine, other)[0] for run in comp.runs]
                worst.append((max([hi, *each]), other, r, lo, hi, each))
        _key, other, r, lo, hi, each = max(worst)
        runs = f"; each fresh run: {' / '.join(f'{m:.3f}' for m in each)}" if each else ""
        out.append(Verdict(f"{name}: {mine} never slower than raw or ORT optimizer beyond noise",
                           hi <= NOISE_LIMIT and all(m <= NOISE_LIMIT for m in each),
                           f"worst pairing vs {other}: {ratio_text(r, lo, hi)}{runs}, "
                           f"target upper end ≤ {NOISE_LIMIT}"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(p)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--only", default="", help="run only models whose name contains this")
    args = p.parse_args(argv)
    load_before = load_average()
    torch.set_num_threads(max(1, args.threads))
    sections, checks, rounds_used = [], [], set()
    with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp_root:
        for case in CASES:
            if args.only.lower() not in case.name.lower():
                continue
            tmp = Path(tmp_root) / case.name
            tmp.mkdir()
            variants, feed = make_variants(case, args.layers, tmp)
            rounds, warmup = rounds_for(args, 60)
            rounds_used.add(rounds)
            title = (f"{case.name}-style, {args.layers} layers, hidden {HIDDEN}, "
                     f"intermediate {INTERMEDIATE}, GELU: {case.gelu}")
            comp, text = compare_variants(title, variants, feed, rounds, warmup, args.threads,
                                          atol=1e-3, replicas=args.replicas, runs=args.runs)
            sections.append(text)
            checks += verdicts(case.name, comp)
    return finish_section("whole_models", args, rounds_used, load_before, checks, sections)


if __name__ == "__main__":
    sys.exit(main())
