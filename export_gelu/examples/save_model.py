"""Save a bundled example as model.pt in any format export-gelu reads.

    python -m export_gelu.examples.save_model bert --format exported -o model.pt
    python -m export_gelu.examples.save_model gpt2 --format torchscript -o gpt2.ts.pt
    python -m export_gelu.examples.save_model lstm --format state_dict -o lstm.sd.pt
    python -m export_gelu.examples.save_model gpt2_model --format exported --dynamic -o gpt2.pt

Formats: exported (torch.export.save; carries example inputs), torchscript (torch.jit.trace),
pickle (torch.save of the whole module), state_dict (torch.save(model.state_dict())).

`bert_model`, `gpt2_model` and `vit_model` are transformers' own models, called by keyword
(input_ids, attention_mask, token_type_ids; pixel_values). `--dynamic` saves an
ExportedProgram with dynamic batch (1..8) and sequence (1..64) dims; its example inputs are
made as export-gelu makes inputs (ids in the vocabulary, a padded attention mask).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from export_gelu.examples.models import EXAMPLES, VOCAB, bert_model, build, gpt2_model, vit_model
from export_gelu.flags.parsers import ToolFlag, tool_parser

#: Where the state_dict examples' builders are (`--model-factory MODULE:NAME`).
FACTORY_MODULE = "export_gelu.examples.models"
FORMATS = ("exported", "torchscript", "pickle", "state_dict")
#: transformers' own models: builder and inputs (name, dims; a str dim is dynamic).
KEYWORD_EXAMPLES = {
    "bert_model": (bert_model, {"input_ids": ("batch", "seq"), "attention_mask": ("batch", "seq"),
                                "token_type_ids": ("batch", "seq")}),
    "gpt2_model": (gpt2_model, {"input_ids": ("batch", "seq"), "attention_mask": ("batch", "seq")}),
    "vit_model": (vit_model, {"pixel_values": ("batch", 3, 32, 32)}),
}
#: The size the keyword examples are captured at, and the ranges `--dynamic` saves.
CAPTURE = {"batch": 3, "seq": 13}
DYNAMIC_RANGES = {"batch": (1, 8), "seq": (1, 64)}


def example_inputs(name: str) -> tuple[torch.Tensor, ...]:
    """The example's inputs, generated exactly as `--input <its spec>` would generate them."""
    from export_gelu.exporter.inputs.specs import make_inputs, parse_input_spec

    arrays = make_inputs([parse_input_spec(EXAMPLES[name].input_spec)])
    return tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays.values())


def keyword_inputs(name: str) -> dict[str, torch.Tensor]:
    """A keyword example's inputs at CAPTURE, made as export-gelu makes inputs by role."""
    from export_gelu.exporter.inputs.generated import ModelHints, generate_inputs
    from export_gelu.exporter.inputs.specs import InputSpec

    _build, inputs = KEYWORD_EXAMPLES[name]
    requests = [InputSpec(n, tuple(CAPTURE.get(d, d) for d in dims),
                          np.dtype(np.float32 if n == "pixel_values" else np.int64))
                for n, dims in inputs.items()]
    feed = generate_inputs(requests, ModelHints(input_vocab=VOCAB, type_vocab=2))
    return {n: torch.from_numpy(np.ascontiguousarray(a)) for n, a in feed.items()}


def _save_keyword(name: str, fmt: str, out: Path, dynamic: bool) -> None:
    build_model, inputs = KEYWORD_EXAMPLES[name]
    model = build_model()
    if fmt == "pickle":
        torch.save(model, str(out))
    elif fmt == "state_dict":
        torch.save(model.state_dict(), str(out))
    elif fmt == "exported":
        shapes = None
        if dynamic:
            dims = {d: torch.export.Dim(d, min=lo, max=hi)
                    for d, (lo, hi) in DYNAMIC_RANGES.items()}
            shapes = {n: {a: dims[d] for a, d in enumerate(row) if isinstance(d, str)}
                      for n, row in inputs.items()}
        with torch.no_grad():
            program = torch.export.export(model, (), keyword_inputs(name),
                                          dynamic_shapes=shapes, strict=False)
        torch.export.save(program, str(out))
    else:
        raise ValueError(f"{name}: format {fmt!r} is not saved for keyword examples")


def save(name: str, fmt: str, out: Path, dynamic: bool = False) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in KEYWORD_EXAMPLES:
            _save_keyword(name, fmt, out, dynamic)
            return out
        if dynamic:
            raise ValueError("--dynamic is for the keyword examples "
                             f"({', '.join(KEYWORD_EXAMPLES)})")
        model = build(name)
        args = example_inputs(name)
        if fmt == "exported":
            with out.open("wb") as fh:
                torch.export.save(torch.export.export(model, args, strict=False), fh)
        elif fmt == "torchscript":
            torch.jit.save(torch.jit.trace(model, args, check_trace=False), str(out))
        elif fmt == "pickle":
            torch.save(model, str(out))
        elif fmt == "state_dict":
            torch.save(model.state_dict(), str(out))
        else:
            raise ValueError(f"unknown format {fmt!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = tool_parser(__doc__ or "", (
        ToolFlag(("example",), {"choices": sorted([*EXAMPLES, *KEYWORD_EXAMPLES])}),
        ToolFlag(("--format",), {"choices": FORMATS, "default": "exported"}),
        ToolFlag(("--dynamic",), {"action": "store_true", "help": "an ExportedProgram with "
                                  "dynamic batch and sequence (keyword examples)"}),
        ToolFlag(("-o", "--output"), {"type": Path, "default": Path("model.pt")}),
    ), argparse.RawDescriptionHelpFormatter)
    args = p.parse_args(argv)
    try:
        save(args.example, args.format, args.output, args.dynamic)
    except ValueError as exc:
        p.error(str(exc))
    if args.example in KEYWORD_EXAMPLES:
        dims = KEYWORD_EXAMPLES[args.example][1]
        shown = " ".join(f"--input {n}:{'x'.join(map(str, d))}" for n, d in dims.items())
        print(f"saved {args.example} ({args.format}) to {args.output}; inputs: {shown}"
              + (f" ; state_dict factory: --model-factory {FACTORY_MODULE}:{args.example}"
                 if args.format == "state_dict" else ""))
        return 0
    ex = EXAMPLES[args.example]
    print(f"saved {args.example} ({args.format}) to {args.output}; inputs: --input {ex.input_spec}"
          + (f" ; state_dict factory: --model-factory {ex.factory}"
             if args.format == "state_dict" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
