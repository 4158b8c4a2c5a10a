"""Exports of more than one graph (an encoder–decoder's encoder_model, decoder_model and
decoder_with_past_model in one folder) and the generation check of with-past graphs.

Each graph is one export through the same stages as any other (plan → inputs → capture …
save → verify), on a state of its own; the folder's report lists them under `graphs` and
sums them up in the keys every report has (GELU sites, parity, notes), and `generation`
holds the greedy-decoding check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export_gelu.check import greedy_decode as gd
from export_gelu.check.parity import ParityResult, skipped
from export_gelu.errors import BadInputError
from export_gelu.notes import Note
from export_gelu.pipeline.checking import ort_missing
from export_gelu.pipeline.stage import Stage, run_stages, stage_io
from export_gelu.pipeline.state import RunState


def is_many(state: RunState) -> bool:
    """The loaded model exports several graphs (into the folder -o names)."""
    return bool(state.loaded is not None and state.loaded.graphs)


def checks_generation(state: RunState) -> bool:
    """A with-past export is checked by decoding, when parity is checked at all."""
    return bool(state.options.verify and state.loaded is not None
                and state.loaded.generation is not None)


def _judged(state: RunState) -> bool:
    """Tokens must agree when the graphs compute the model's own math in float32."""
    return state.options.gelu == "keep" and state.run_precision in ("fp32", "fp64")


def _prompt(loaded: Any) -> dict[str, Any]:
    """The first row of the example inputs (batch 1), as numpy."""
    return {n: t[:1].detach().cpu().numpy() for n, t in
            zip(loaded.input_names, loaded.example_inputs or ())}


def _decode(state: RunState, graphs: dict[str, Path], first: Any) -> gd.DecodeResult:
    fm = state.loaded.generation
    prompt = _prompt(first)
    threads = state.options.threads
    if "encoder" in graphs:
        start = int(getattr(fm.config, "decoder_start_token_id", None) or 0)
        deployed = gd.seq2seq_tokens(graphs, prompt, start, threads=threads)
        reference = gd.generate_tokens(fm.model, gd.torch_inputs(prompt))
    else:
        ids = prompt["input_ids"][:, :4]
        deployed = gd.decoder_tokens(graphs["decoder_with_past"], ids, threads=threads)
        reference = gd.generate_tokens(fm.model, gd.torch_inputs({"input_ids": ids}))
    return gd.compare(reference, deployed, _judged(state))


@stage_io(reads=("loaded", "options", "output", "run_precision"), writes=())
def generation_check(state: RunState, graphs: dict[str, Path] | None = None,
                     first: Any = None) -> None:
    """output(s) → greedy decoding in ONNX Runtime vs generate, in the report's
    `generation`; tokens that differ fail the run (exit 1) when the math is the model's."""
    rep = state.report
    missing = ort_missing()
    if missing:
        rep.generation = gd.DecodeResult("skipped", reason=missing).to_json()
        return
    if state.loaded.generation.model is None:
        rep.generation = gd.DecodeResult("skipped", reason="the model was freed").to_json()
        return
    state.progress.step(f"greedy decoding {gd.STEPS} tokens in ONNX Runtime and with generate")
    graphs = graphs or {"decoder_with_past": state.output}
    result = _decode(state, graphs, first or state.loaded)
    rep.generation = result.to_json()
    if result.status == "differs":
        rep.notes.append(Note(f"greedy decoding differs from generate ({result.reason}); not "
                              f"judged: --gelu {state.options.gelu} / {state.run_precision} "
                              "changes the math", "generation-differs"))


# -- several graphs ----------------------------------------------------------------------------

def refuse_flags_for_many(state: RunState) -> None:
    """Flags that name one graph's inputs or files do not fit several graphs."""
    o = state.options
    given = [flag for flag, value in (("--input", o.inputs), ("--inputs", o.inputs_npz),
                                      ("--dynamic", o.dynamic), ("--engine", o.engine),
                                      ("--bundle", o.bundle), ("--output-names", o.output_names))
             if value]
    if given:
        raise BadInputError(f"{state.model_path}: task {state.loaded.task} exports "
                            f"{len(state.loaded.graphs)} graphs, each with its own inputs and "
                            f"files; drop {', '.join(given)}")


def _graph_options(state: RunState, graph: Any) -> Any:
    return dataclasses.replace(state.options, output=str(state.output / graph.file_name),
                               report=None, report_md=None, bundle=None, engine=None)


def _sum_parity(reports: dict[str, Any]) -> ParityResult:
    """One verdict for the graphs: failed if any failed, passed if all passed."""
    results = list(reports.values())
    failed = [(n, r.parity) for n, r in reports.items() if r.parity.status == "failed"]
    if failed:
        name, parity = failed[0]
        return dataclasses.replace(parity, reason=f"{name}: {parity.reason}")
    if any(r.parity.status != "passed" for r in results):
        reasons = {r.parity.reason for r in results if r.parity.status == "skipped"}
        return skipped("; ".join(sorted(reasons)) or "not every graph was checked")
    first = results[0].parity
    outputs = {f"{n}/{o}": e for n, r in reports.items() for o, e in r.parity.outputs.items()}
    return ParityResult("passed", f"all {len(results)} graphs passed", first.atol, first.rtol,
                        list(first.runners), outputs, first.iterations)


def export_graphs(state: RunState, stages: Sequence[Stage]) -> None:
    """loaded.graphs → each exported and checked by `stages` (export's own, per graph) into
    the folder `output`; the report sums them up (and lists each under `graphs`)."""
    refuse_flags_for_many(state)
    rep = state.report
    state.output.mkdir(parents=True, exist_ok=True)
    reports, paths, subs = {}, {}, []
    for graph in state.loaded.graphs:
        state.progress.step(f"graph {graph.file_name}")
        options = _graph_options(state, graph)
        checked = dataclasses.replace(state.checked, outputs=None)  # checked for the folder
        sub = RunState(options, checked, state.model_path, state.progress, clock=state.clock,
                       loaded=graph)
        run_stages(stages, sub)
        reports[graph.file_name] = sub.report
        paths[graph.file_name] = sub.output
        subs.append(sub)
    rep.output = str(state.output)
    rep.task = state.loaded.task
    rep.graphs = {n: r.to_json() for n, r in reports.items()}
    rep.gelu_sites = [dataclasses.replace(s, module=f"{Path(n).stem}:{s.module or s.name}")
                      for n, r in reports.items() for s in r.gelu_sites]
    rep.parity = _sum_parity(reports) if state.options.verify else rep.parity
    first = next(iter(reports.values()))
    rep.opset, rep.exporter = first.opset, first.exporter
    rep.compatibility = {k: v for r in reports.values() for k, v in r.compatibility.items()}
    rep.notes.extend(dict.fromkeys(n for r in reports.values() for n in r.notes))
    state.run_precision = subs[0].run_precision
    if checks_generation(state):
        roles = {g.file_name: g for g in state.loaded.graphs}
        by_role = {_role(name): path for name, path in paths.items() if name in roles}
        generation_check(state, by_role, state.loaded.graphs[0])


def _role(file_name: str) -> str:
    return file_name.removesuffix("_model.onnx")
