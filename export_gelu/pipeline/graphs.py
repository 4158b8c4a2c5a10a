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

import numpy as np

from export_gelu.check import greedy_decode as gd
from export_gelu.check.parity import ParityResult, skipped
from export_gelu.errors import BadInputError
from export_gelu.exporter.hf.inputs import start_token
from export_gelu.exporter.loading.load import LoadedModel
from export_gelu.notes import Note
from export_gelu.options import ExportOptions
from export_gelu.pipeline.checking import ort_missing
from export_gelu.pipeline.stage import Stage, run_stages, stage_io
from export_gelu.pipeline.state import ExportState, need, sub_state


def is_many(state: ExportState) -> bool:
    """The loaded model exports several graphs (into the folder -o names)."""
    return bool(state.loaded is not None and state.loaded.graphs)


def checks_generation(state: ExportState) -> bool:
    """A with-past export is checked by decoding, when parity is checked at all."""
    return bool(state.options.verify and state.loaded is not None
                and state.loaded.generation is not None)


def _judged(state: ExportState) -> bool:
    """Tokens must agree when the graphs compute the model's own math in float32."""
    return state.options.gelu == "keep" and state.run_precision in ("fp32", "fp64")


def _prompt(loaded: LoadedModel) -> dict[str, np.ndarray]:
    """The first row of the example inputs (batch 1), as numpy."""
    return {n: t[:1].detach().cpu().numpy() for n, t in
            zip(loaded.input_names, loaded.example_inputs or ())}


def _decode(state: ExportState, graphs: dict[str, Path], first: LoadedModel
            ) -> gd.DecodeResult:
    fm = need(state.loaded, "loaded").generation
    prompt = _prompt(first)
    threads = state.options.threads
    if "encoder" in graphs:
        start = start_token(fm.config)
        deployed = gd.seq2seq_tokens(graphs, prompt, start, threads=threads)
        reference = gd.generate_tokens(fm.model, gd.torch_inputs(prompt))
    else:
        ids = prompt["input_ids"][:, :4]
        deployed = gd.decoder_tokens(graphs["decoder_with_past"], ids, threads=threads)
        reference = gd.generate_tokens(fm.model, gd.torch_inputs({"input_ids": ids}))
    return gd.compare(reference, deployed, _judged(state))


@stage_io(reads=("loaded", "options", "output", "run_precision"), writes=())
def generation_check(state: ExportState) -> None:
    """output → greedy decoding in ONNX Runtime vs generate, in the report's `generation`;
    tokens that differ fail the run (exit 1) when the math is the model's."""
    decode_and_compare(state)


def decode_and_compare(state: ExportState, graphs: dict[str, Path] | None = None,
                       first: LoadedModel | None = None) -> None:
    """The generation check of `graphs` (default: the output as decoder_with_past), prompted
    with `first`'s example inputs (default: the loaded model's); also run by the several-graphs
    stage on its graphs."""
    rep, loaded = state.report, need(state.loaded, "loaded")
    missing = ort_missing()
    if missing:
        rep.generation = gd.DecodeResult("skipped", reason=missing).to_json()
        return
    if loaded.generation.model is None:
        rep.generation = gd.DecodeResult("skipped", reason="the model was freed").to_json()
        return
    state.progress.step(f"greedy decoding {gd.STEPS} tokens in ONNX Runtime and with generate")
    graphs = graphs or {"decoder_with_past": need(state.output, "output")}
    result = _decode(state, graphs, first or loaded)
    rep.generation = result.to_json()
    if result.status == "differs":
        rep.notes.append(Note(f"greedy decoding differs from generate ({result.reason}); not "
                              f"judged: --gelu {state.options.gelu} / {state.run_precision} "
                              "changes the math", "generation-differs"))


# -- several graphs ----------------------------------------------------------------------------

def refuse_flags_for_many(state: ExportState) -> None:
    """Flags that name one graph's inputs or files do not fit several graphs."""
    o = state.options
    given = [flag for flag, value in (("--input", o.inputs), ("--inputs", o.inputs_npz),
                                      ("--dynamic", o.dynamic), ("--engine", o.engine),
                                      ("--bundle", o.bundle), ("--output-names", o.output_names))
             if value]
    if given:
        loaded = need(state.loaded, "loaded")
        raise BadInputError(f"{state.model_path}: task {loaded.task} exports "
                            f"{len(loaded.graphs)} graphs, each with its own inputs and "
                            f"files; drop {', '.join(given)}")


def _graph_options(state: ExportState, graph: LoadedModel) -> ExportOptions:
    return dataclasses.replace(state.options,
                               output=str(need(state.output, "output") / graph.file_name),
                               report=None, report_md=None, bundle=None, engine=None)


def _sum_parity(verdicts: dict[str, ParityResult]) -> ParityResult:
    """One verdict for the graphs (file name → its verdict): failed if any failed, passed if
    all passed."""
    results = list(verdicts.values())
    failed = [(n, p) for n, p in verdicts.items() if p.status == "failed"]
    if failed:
        name, parity = failed[0]
        return dataclasses.replace(parity, reason=f"{name}: {parity.reason}")
    if any(p.status != "passed" for p in results):
        reasons = {p.reason for p in results if p.status == "skipped"}
        return skipped("; ".join(sorted(reasons)) or "not every graph was checked")
    first = results[0]
    outputs = {f"{n}/{o}": e for n, p in verdicts.items() for o, e in p.outputs.items()}
    said = "; ".join(f"{n}: {p.reason}" for n, p in verdicts.items() if p.reason)
    return ParityResult("passed", f"all {len(results)} graphs passed" + (f"; {said}" if said
                                                                         else ""),
                        first.atol, first.rtol, list(first.runners), outputs, first.iterations)


def export_graphs(state: ExportState, stages: Sequence[Stage[ExportState]]) -> None:
    """loaded.graphs → each exported and checked by `stages` (export's own, per graph) into
    the folder `output`; the report sums them up (and lists each under `graphs`)."""
    refuse_flags_for_many(state)
    rep, loaded, output = state.report, need(state.loaded, "loaded"), need(state.output, "output")
    output.mkdir(parents=True, exist_ok=True)
    subs: dict[str, ExportState] = {}
    for graph in loaded.graphs:
        state.progress.step(f"graph {graph.file_name}")
        options = _graph_options(state, graph)
        checked = dataclasses.replace(state.checked, outputs=None)  # checked for the folder
        sub = sub_state(state, options, checked, loaded=graph, clock=state.clock)
        run_stages(stages, sub)
        subs[graph.file_name] = sub
    reports = {n: sub.report for n, sub in subs.items()}
    rep.output = str(output)
    rep.task = loaded.task
    rep.graphs = {n: r.to_json() for n, r in reports.items()}
    state.gelu_sites = rep.gelu_sites = [
        dataclasses.replace(s, module=f"{Path(n).stem}:{s.module or s.name}")
        for n, sub in subs.items() for s in sub.gelu_sites]
    if state.options.verify:  # each graph was checked (GRAPH_STAGES' verify)
        state.parity = rep.parity = _sum_parity({n: need(sub.parity, "parity")
                                                 for n, sub in subs.items()})
    first = next(iter(reports.values()))
    rep.opset, rep.exporter = first.opset, first.exporter
    rep.compatibility = {k: v for r in reports.values() for k, v in r.compatibility.items()}
    rep.notes.extend(dict.fromkeys(n for r in reports.values() for n in r.notes))
    state.run_precision = next(iter(subs.values())).run_precision
    if checks_generation(state):
        roles = {g.file_name: g for g in loaded.graphs}
        by_role = {_role(name): need(sub.output, "output") for name, sub in subs.items()
                   if name in roles}
        decode_and_compare(state, by_role, loaded.graphs[0])


def _role(file_name: str) -> str:
    return file_name.removesuffix("_model.onnx")
