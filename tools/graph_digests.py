"""SHA-256 of the graphs export-gelu writes for the bundled examples, to show a refactor
changed no output byte (the house's rule: graphs byte-identical before and after).

    python -m tools.graph_digests MODELS_DIR OUT.json [--quick]

MODELS_DIR holds the model files (made once with examples.save_model and shared by the two
checkouts compared, so both read the same bytes); each export runs with `--no-verify` into a
fresh folder. The checkout's own path, which torch writes into node stack traces, is masked
before hashing. Run it from each checkout and compare the two JSON files (`--compare A B`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLES = ("bert", "gpt2", "vit", "lstm")
TARGETS = ("onnx", "ort", "trt", "trt7.0", "trt7.1", "trt7.2", "trt8.0", "trt8.2", "trt8.4",
           "trt8.5", "trt8.6", "trt9", "trt10", "trt11")
#: Further cases: (model file stem, target, extra flags).
EXTRA = (("bert", "trt8.6", ("--precision", "fp16")), ("gpt2", "trt10", ("--precision", "fp16")),
         ("bert", "ort", ("--precision", "fp16")), ("hf_bert", "trt8.2", ()),
         ("hf_gpt2", "trt10", ()), ("hf_bert", "ort", ()))


def make_models(folder: Path) -> None:
    """The model files every compared checkout exports (once)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in EXAMPLES:
        path = folder / f"{name}.pt"
        if not path.exists():
            subprocess.run([sys.executable, "-m", "examples.save_model", name, "--format",
                            "exported", "-o", str(path)], check=True)
    for name in ("bert", "gpt2"):
        path = folder / f"hf_{name}"
        if not path.exists():
            code = ("import sys; from pathlib import Path; from examples.hf_folders import "
                    f"save_folder; save_folder({name!r}, Path(sys.argv[1]))")
            subprocess.run([sys.executable, "-c", code, str(path)], check=True)


def digest(out_dir: Path, roots: tuple[Path, ...]) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in out_dir.rglob("*") if p.is_file() and p.suffix in (".onnx",
                                                                                  ".data")):
        data = f.read_bytes()
        for root in roots:
            data = data.replace(str(root).encode(), b"<ROOT>")
        h.update(f.name.encode() + b"\0" + data)
    return h.hexdigest()


def run(models: Path, quick: bool, also: tuple[Path, ...] = ()) -> dict[str, str]:
    roots = (Path.cwd().resolve(), *also)
    cases = [(m, t, ()) for m in EXAMPLES for t in TARGETS] + list(EXTRA)
    if quick:
        cases = [c for c in cases if c[1] in ("ort", "trt8.2", "trt10") or c[2]]
    result: dict[str, str] = {}
    exe = str(Path(sys.executable).parent / "export-gelu")
    for stem, target, extra in cases:
        key = " ".join((stem, target, *extra))
        src = models / (stem if stem.startswith("hf_") else f"{stem}.pt")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out.onnx"
            proc = subprocess.run([exe, str(src), "--target", target, "-o", str(out),
                                   "--no-verify", *extra], capture_output=True, text=True)
            if proc.returncode != 0:
                result[key] = f"exit {proc.returncode}: {proc.stderr.strip()[-200:]}"
            else:
                result[key] = digest(Path(tmp), roots)
        print(f"{key}: {result[key][:16]}", flush=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", type=Path, nargs="?")
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--quick", action="store_true", help="ort, trt8.2, trt10 and the extras")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    ap.add_argument("--mask", type=Path, action="append", default=[], metavar="PATH",
                    help="another checkout path to mask (the one the model files were saved "
                         "from); run from a checkout whose path has the same length as the "
                         "compared one's, since a path's length is in the bytes")
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(p.read_text()) for p in args.compare)
        diff = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
        print(f"{len(a.keys() & b.keys()) - len(diff)} of {len(a.keys() & b.keys())} identical")
        for k in diff:
            print(f"  differs: {k}")
        return 1 if diff else 0
    make_models(args.models)
    digests = run(args.models, args.quick, tuple(args.mask))
    args.out.write_text(json.dumps(digests, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
