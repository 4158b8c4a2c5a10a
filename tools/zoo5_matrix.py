"""The fifth zoo's matrix (issue 44): every architecture of examples/zoo5.py, saved three ways
(a save_pretrained folder, a .pt2, in memory through the API), exported for each target, with
its exit code and one line; every graph that passed rechecked in ONNX Runtime against eager
PyTorch on fresh inputs.

    python -m tools.zoo5_matrix OUT.jsonl [--targets ort,trt8.2] [--ways folder,pt2,api]
                                          [--models yolos,...]
    python -m tools.zoo5_matrix --table A.jsonl [B.jsonl]   # a Markdown table (before → after)

Each model runs in a process of its own (one import of torch per model, a crash or a hang
costs one row); rows are appended to OUT.jsonl as they finish. The export_gelu imported is the
one on the path, so the same tool measures another checkout with PYTHONPATH=CHECKOUT.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
WAYS = ("folder", "pt2", "api")


def _zoo() -> Any:
    """examples/zoo5.py of this checkout, whichever export_gelu is imported."""
    spec = importlib.util.spec_from_file_location("zoo5", HERE / "examples" / "zoo5.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fresh_error(onnx_path: Path, model: Any, feed: dict[str, Any]) -> float | None:
    """Max |graph − eager| over the graph's outputs that the model's output names, on `feed`
    (fresh values at the example shapes); None when no output could be matched."""
    import numpy as np
    import onnxruntime as ort
    import torch

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    wanted = [i.name for i in session.get_inputs()]
    if any(n not in feed for n in wanted):
        return None
    for i in session.get_inputs():  # a static graph at other sizes than the example's
        if any(isinstance(d, int) and d != s for d, s in zip(i.shape, feed[i.name].shape)):
            return None
    got = session.run(None, {n: feed[n].numpy() for n in wanted})
    kwargs = dict(feed)
    if hasattr(getattr(model, "config", None), "use_cache"):
        kwargs["use_cache"] = False
    with torch.no_grad():
        ref = model(**kwargs)
    fields = dict(ref.items()) if hasattr(ref, "items") else {}
    worst = None
    for out, value in zip(session.get_outputs(), got):
        expected = fields.get(out.name)
        if not isinstance(expected, torch.Tensor) or tuple(expected.shape) != value.shape:
            continue
        err = float(np.abs(value.astype(np.float64) - expected.double().numpy()).max())
        worst = err if worst is None else max(worst, err)
    return worst


def _fresh_feed(example: dict[str, Any]) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(1234)
    out = {}
    for name, t in example.items():
        if t.dtype.is_floating_point:
            out[name] = torch.randn(t.shape, generator=g, dtype=t.dtype)
        elif "mask" in name:
            out[name] = t
        else:
            out[name] = torch.randint(int(t.min()), int(t.max()) + 1, t.shape, generator=g)
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split())[:400]


def _run(zoo: Any, name: str, way: str, target: str, work: Path) -> dict[str, Any]:
    import export_gelu
    from export_gelu.errors import failure_outcome

    out = work / f"{name}.{way}.{target}.onnx"
    row: dict[str, Any] = {"model": name, "way": way, "target": target}
    start = time.time()
    try:
        if way == "folder":
            source = work / f"{name}.folder"
            if not source.exists():
                zoo.save_folder(name, source)
            report = export_gelu.export(str(source), target=target, output=str(out),
                                        iterations=0)
        elif way == "pt2":
            source = work / f"{name}.pt2"
            if not source.exists():
                zoo.save_pt2(name, source)
            report = export_gelu.export(str(source), target=target, output=str(out),
                                        iterations=0)
        else:
            model = zoo.build(name)
            report = export_gelu.export(model, kwargs=zoo.example_inputs(name), target=target,
                                        output=str(out), iterations=0)
        row["exit"] = report.exit_code
        row["parity"] = report.parity.status if report.parity else None
        row["line"] = _one_line(report.parity.reason if report.parity else "")
        row["notes"] = sorted({n.code for n in report.notes})
        if report.exit_code == 0 and out.is_file():
            try:
                row["fresh_error"] = _fresh_error(out, zoo.build(name),
                                                  _fresh_feed(zoo.example_inputs(name)))
            except Exception as exc:  # noqa: BLE001 - the recheck's own failure, said
                row["fresh_error"] = f"recheck failed: {_one_line(str(exc))[:200]}"
    except BaseException as exc:  # noqa: BLE001 - every ending is a row
        if isinstance(exc, KeyboardInterrupt) and type(exc) is KeyboardInterrupt:
            raise
        outcome = failure_outcome(exc)
        row["exit"], row["line"] = outcome.code, _one_line(outcome.line)
    row["seconds"] = round(time.time() - start, 1)
    return row


def run_model(name: str, ways: list[str], targets: list[str], sink: Path) -> None:
    """Every way × target of one model, appended to `sink`."""
    warnings.simplefilter("ignore")
    os.environ.setdefault("EXPORT_GELU_QUIET", "1")
    zoo = _zoo()
    with tempfile.TemporaryDirectory() as tmp:
        for way in ways:
            for target in targets:
                row = _run(zoo, name, way, target, Path(tmp))
                with sink.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(json.dumps(row)[:300], flush=True)


def _rows(path: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    rows = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows[(r["model"], r["way"], r["target"])] = r
    return rows


def table(after: Path, before: Path | None = None) -> str:
    """A Markdown table: model × way, one column per target, `before → after` exit codes."""
    new = _rows(after)
    old = _rows(before) if before else {}
    targets = list(dict.fromkeys(k[2] for k in new))
    models = list(dict.fromkeys(k[0] for k in new))
    lines = ["| model | way | " + " | ".join(targets) + " |",
             "|---|---|" + "---|" * len(targets)]
    for model in models:
        for way in WAYS:
            cells = []
            for target in targets:
                r = new.get((model, way, target))
                if r is None:
                    cells.append("")
                    continue
                o = old.get((model, way, target))
                cells.append(f"{o['exit']} → {r['exit']}" if o else str(r["exit"]))
            if any(cells):
                lines.append(f"| {model} | {way} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--targets", default="ort,trt8.2")
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--models", default="")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("--table", nargs="+")
    args = parser.parse_args(argv)
    if args.table:
        print(table(Path(args.table[-1]), Path(args.table[0]) if len(args.table) > 1 else None))
        return 0
    ways, targets = args.ways.split(","), args.targets.split(",")
    if args.one:
        run_model(args.one, ways, targets, Path(args.out))
        return 0
    models = args.models.split(",") if args.models else list(_zoo().ALL)
    for name in models:
        cmd = [sys.executable, "-m", "tools.zoo5_matrix", args.out, "--one", name,
               "--ways", args.ways, "--targets", args.targets]
        try:
            subprocess.run(cmd, cwd=HERE, timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            with Path(args.out).open("a") as fh:
                fh.write(json.dumps({"model": name, "way": "*", "target": "*", "exit": None,
                                     "line": f"timed out after {args.timeout} s"}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
