"""Save a bundled example as model.pt in any format export-gelu reads.

    python -m examples.save_model bert --format exported -o model.pt
    python -m examples.save_model gpt2 --format torchscript -o gpt2.ts.pt
    python -m examples.save_model lstm --format state_dict -o lstm.sd.pt

Formats: exported (torch.export.save; carries example inputs), torchscript (torch.jit.trace),
pickle (torch.save of the whole module), state_dict (torch.save(model.state_dict())).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from examples.models import EXAMPLES, build

FORMATS = ("exported", "torchscript", "pickle", "state_dict")


def example_inputs(name: str) -> tuple[torch.Tensor, ...]:
    """The example's inputs, generated exactly as `--input <its spec>` would generate them."""
    from export_gelu.exporter.inputs import make_inputs, parse_input_spec

    arrays = make_inputs([parse_input_spec(EXAMPLES[name].input_spec)])
    return tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays.values())


def save(name: str, fmt: str, out: Path) -> Path:
    model = build(name)
    args = example_inputs(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
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
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("example", choices=sorted(EXAMPLES))
    p.add_argument("--format", choices=FORMATS, default="exported")
    p.add_argument("-o", "--output", type=Path, default=Path("model.pt"))
    args = p.parse_args(argv)
    save(args.example, args.format, args.output)
    ex = EXAMPLES[args.example]
    print(f"saved {args.example} ({args.format}) to {args.output}; inputs: --input {ex.input_spec}"
          + (f" ; state_dict factory: --model-factory {ex.factory}"
             if args.format == "state_dict" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
