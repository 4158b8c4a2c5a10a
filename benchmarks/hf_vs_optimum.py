"""export-gelu and `optimum-cli export onnx` on the same save_pretrained folders, side by side:
whether each export succeeds, its parity check, the GELU nodes in the graphs it writes, and
the export's wall time (one fresh process each, model loading and each tool's own output
check included).

The folders are examples/hf_folders.py's tiny random models (hidden 32, two layers), so the
times measure each tool's fixed cost more than model size. Both export for ONNX Runtime
(export-gelu `--target ort`; optimum its default opset) with the task config.json's class
gives (optimum cannot infer a task from a local folder, so it is passed to both).

optimum-onnx 0.1 needs transformers < 4.58 (and optimum 2.1), which the project's own
environment does not have: it runs from a virtual environment of its own,
`--optimum-venv DIR` (default build/optimum-venv), made by `--setup`:

    python -m benchmarks.hf_vs_optimum --setup     # once: torch 2.13 CPU, then optimum-onnx
    python -m benchmarks.hf_vs_optimum             # writes the section in RESULTS.md

The GELU nodes of every graph, either tool's, are read by the same recogniser
(`export_gelu.inspect_model`): each site's kind and how it is written in the file.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks.results import write_section

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_VENV = ROOT / "build" / "optimum-venv"
#: What --setup installs into the optimum venv (torch first, so pip keeps the CPU build).
OPTIMUM_PACKAGES = ("optimum-onnx==0.1.0", "optimum==2.1.*", "transformers<4.58", "onnxruntime",
                    "onnx")
TIMEOUT = 900

#: Run inside the optimum venv: main_export with its validation logged, then the result.
OPTIMUM_DRIVER = r"""
import json, logging, sys, traceback
from optimum.utils import logging as optimum_logging
optimum_logging.set_verbosity_info()
from optimum.exporters.onnx import main_export
folder, out, task = sys.argv[1:4]
try:
    main_export(model_name_or_path=folder, output=out, task=task)
    print(json.dumps({"ok": True}))
except Exception as exc:
    why = (str(exc).splitlines() or [""])[0][:200]
    print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {why}"}))
"""


def setup(venv: Path) -> None:
    """Make the optimum venv: torch 2.13 (the CPU build) first, then optimum-onnx 0.1."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    subprocess.run([*pip, *OPTIMUM_PACKAGES], check=True)


def _form(site: dict, ops: dict[str, str]) -> str:
    """How a site is written: its nodes' op types (`com.microsoft.FastGelu`, `Gelu`, or the
    primitives `Add/Div/Erf/Mul`)."""
    kinds = sorted({ops[n] for n in site["onnx_nodes"] if n in ops})
    return "/".join(kinds) or "?"


def _site_forms(graphs: list[Path]) -> str:
    """GELU sites of the graphs by kind and the ops that compute them, e.g.
    `2 exact as com.microsoft.Gelu`."""
    import onnx

    from export_gelu import inspect_model

    found: Counter = Counter()
    for graph in graphs:
        model = onnx.load(str(graph), load_external_data=False)
        ops = {n.name: f"{n.domain}.{n.op_type}" if n.domain else n.op_type
               for n in model.graph.node}
        for site in inspect_model(graph, ["ort"], dry_run=False)["gelu_sites"]:
            found[(site["kind"], _form(site, ops))] += 1
    return "; ".join(f"{n} {kind} as {form}" for (kind, form), n in sorted(found.items())) \
        or "none found"


def run_export_gelu(folder: Path, task: str, out_dir: Path) -> dict:
    out = out_dir / "export-gelu"
    out.mkdir()
    report = out / "report.json"
    target = out / "graphs"
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "export_gelu.cli", str(folder), "--target", "ort",
                          "--task", task, "-o", str(target), "--report", str(report),
                          "--iterations", "0"], capture_output=True, text=True, cwd=ROOT,
                         timeout=TIMEOUT)
    seconds = time.perf_counter() - start
    if not report.exists():
        return {"ok": False, "seconds": seconds,
                "error": (res.stderr.strip().splitlines() or ["no report"])[-1][:200]}
    rep = json.loads(report.read_text())
    graphs = sorted(target.glob("*.onnx")) if target.is_dir() else [target]
    parity = rep["parity"]
    worst = max((o["max_abs"] for o in parity["outputs"].values()), default=float("nan"))
    text = f"{parity['status']} (max abs {worst:.1e}, atol {parity['atol']:g})"
    if rep.get("generation"):
        text += f"; greedy decoding {rep['generation']['status']}"
    return {"ok": res.returncode == 0, "seconds": seconds, "parity": text,
            "graphs": len(graphs), "gelus": _site_forms(graphs)}


def run_optimum(venv: Path, folder: Path, task: str, out_dir: Path) -> dict:
    out = out_dir / "optimum"
    start = time.perf_counter()
    res = subprocess.run([str(venv / "bin" / "python"), "-c", OPTIMUM_DRIVER, str(folder),
                          str(out), task], capture_output=True, text=True, timeout=TIMEOUT)
    seconds = time.perf_counter() - start
    lines = res.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else \
        {"ok": False, "error": (res.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    if not result["ok"]:
        return {"ok": False, "seconds": seconds, "error": result["error"]}
    parity = optimum_parity(res.stderr)
    graphs = sorted(out.glob("*.onnx"))
    return {"ok": True, "seconds": seconds, "parity": parity, "graphs": len(graphs),
            "gelus": _site_forms(graphs)}


def optimum_parity(log: str) -> str:
    """optimum's validation verdict from its log: every output within its atol, or the
    largest difference it reported over it."""
    close = log.count("all values close")
    found = re.search(r"atol: ([0-9.eE+-]+)\)", log)
    atol = found.group(1) if found else "?"
    if "not within the set tolerance" in log or "values not close enough" in log:
        number = r"([0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?)"
        diffs = re.findall(r"max(?:imum absolute)? diff\D{0,40}?" + number, log)
        return f"over its atol {atol} (max diff {float(diffs[-1]):.1e})" if diffs else \
            "over its atol"
    if close:
        return f"passed ({close} outputs within atol {atol})"
    return "not validated"


def _row(name: str, task: str, tool: str, r: dict) -> str:
    if not r["ok"]:
        return f"| {name} | {task} | {tool} | **failed**: {r.get('error', '')} | — | — | " \
               f"{r['seconds']:.1f} |"
    return (f"| {name} | {task} | {tool} | yes ({r['graphs']} graph(s)) | {r['parity']} | "
            f"{r['gelus']} | {r['seconds']:.1f} |")


def main(argv: list[str] | None = None) -> int:
    from examples.hf_folders import MODELS, save_folder

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--optimum-venv", type=Path, default=DEFAULT_VENV)
    p.add_argument("--setup", action="store_true", help="make the optimum venv and exit")
    p.add_argument("models", nargs="*", help=f"some of {', '.join(MODELS)} (default: all)")
    args = p.parse_args(argv)
    if args.setup:
        setup(args.optimum_venv)
        return 0
    if not (args.optimum_venv / "bin" / "python").exists():
        print(f"no optimum venv at {args.optimum_venv}: run with --setup first", file=sys.stderr)
        return 2
    rows, counts = [], Counter()
    # warm both tools' imports once (the first import after an install compiles bytecode)
    subprocess.run([sys.executable, "-c", "import export_gelu.api, transformers"], cwd=ROOT,
                   capture_output=True, timeout=TIMEOUT)
    subprocess.run([str(args.optimum_venv / "bin" / "python"), "-c",
                    "import optimum.exporters.onnx"], capture_output=True, timeout=TIMEOUT)
    with tempfile.TemporaryDirectory(prefix="hf-vs-optimum-") as tmp:
        for name in args.models or list(MODELS):
            task = MODELS[name][1]
            work = Path(tmp) / name
            work.mkdir()
            folder = save_folder(name, work / "folder")
            ours = run_export_gelu(folder, task, work)
            theirs = run_optimum(args.optimum_venv, folder, task, work)
            counts["export-gelu"] += ours["ok"]
            counts["optimum"] += theirs["ok"]
            rows += [_row(name, task, "export-gelu", ours), _row(name, task, "optimum", theirs)]
            print(rows[-2], rows[-1], sep="\n", flush=True)
    n = len(args.models or MODELS)
    body = "\n".join([
        f"Both tools on the same {n} save_pretrained folders (examples/hf_folders.py: tiny random "
        "models, hidden 32, two layers), for ONNX Runtime on CPU, each run in a fresh process "
        "(time = whole command: imports, loading, export, its own check; both tools' imports "
        "warmed once first). export-gelu "
        "`--target ort --iterations 0`: parity against PyTorch on its example inputs, and for "
        "with-past tasks 8 greedy tokens against `generate`; optimum-onnx 0.1.0 (optimum 2.1, "
        "transformers < 4.58, in its own venv) `main_export` with its default validation. "
        "GELU nodes: every graph read by export-gelu's recogniser (`inspect_model`): kind, "
        "and how the file writes it.",
        "",
        f"Exports that succeeded: export-gelu {counts['export-gelu']}/{n}, optimum "
        f"{counts['optimum']}/{n}.",
        "",
        "| model | task | tool | succeeded | parity | GELU nodes in the graphs | seconds |",
        "|---|---|---|---|---|---|---:|",
        *rows,
    ])
    write_section("hf_vs_optimum", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
