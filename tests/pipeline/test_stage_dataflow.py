"""Every stage declares what it reads from the run's state and what it writes there, the
declaration matches the code (pipeline/dataflow.py reads it), and docs/architecture.md's
stage tables are generated from the declarations."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from export_gelu.pipeline import dataflow
from export_gelu.pipeline.dataflow import Accesses, stage_accesses
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import RunState
from tests.conftest import ROOT

STAGES = [(name, st) for name, lst in dataflow._command_lists().items() for st in lst]


@pytest.mark.parametrize("command, stage", STAGES,
                         ids=[f"{name}:{st.name}" for name, st in STAGES])
def test_each_stage_declares_what_its_code_reads_and_writes(command, stage):
    assert stage.io is not None, f"{command}: stage {stage.name} declares nothing (stage_io)"
    found = stage_accesses(stage.run)
    assert set(stage.io.reads) == found.reads, (
        f"{command}: {stage.name} reads {sorted(found.reads)}, declares "
        f"{list(stage.io.reads)}")
    assert set(stage.io.writes) == found.writes, (
        f"{command}: {stage.name} writes {sorted(found.writes)}, declares "
        f"{list(stage.io.writes)}")


def test_every_declared_name_is_a_state_field():
    names = {n for _c, st in STAGES if st.io for n in (*st.io.reads, *st.io.writes)}
    assert names <= dataflow.FIELDS, sorted(names - dataflow.FIELDS)


def test_architecture_doc_and_readme_are_generated_from_the_declarations():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    hint = "run: python -m export_gelu.pipeline.dataflow --write"
    assert dataflow.with_tables(doc) == doc, hint
    assert dataflow.readme_with_stages(readme) == readme, hint
    assert " → ".join(st.name for st in dataflow._command_lists()["EXPORT"]) in \
        " ".join(readme.split())


# -- the reader itself, on hand-written stage functions ------------------------------------

def _helper_writes_graph(state: RunState) -> None:
    state.graph = None


def _run_with(state: RunState, fn: Callable[[RunState], None]) -> None:
    fn(state)


def _stage_a(state: RunState) -> None:
    if state.is_onnx:  # a property: reads `loaded`
        state.feeds.append(state.feed)  # a mutating call writes, `feed` reads `feeds`
    state.manifest["k"] = 1  # a subscript store writes
    state.device_forms.update({})
    _helper_writes_graph(state)  # a helper handed the state: its writes count
    _run_with(state, _helper_writes_graph)  # a function handed over with the state too
    state.progress.step("x")  # channels are not listed
    state.report.notes.append(None)


def _stage_b(run: RunState) -> None:
    run.opset = run.profile.opset_ceiling  # any parameter name; attribute chains read the root


def _stage_alias(state: RunState) -> None:
    manifest = state.manifest
    manifest["k"] = 1  # through another name: not seen (docs say so)


def test_the_reader_finds_reads_writes_helpers_and_properties():
    assert stage_accesses(_stage_a) == Accesses(
        reads=frozenset({"loaded", "feeds", "manifest", "device_forms"}),
        writes=frozenset({"feeds", "manifest", "device_forms", "graph"}))
    assert stage_accesses(_stage_b) == Accesses(reads=frozenset({"profile"}),
                                                writes=frozenset({"opset"}))
    assert stage_accesses(_stage_alias) == Accesses(reads=frozenset({"manifest"}))


def test_a_declaration_is_sorted_and_found_on_the_stage():
    from export_gelu.pipeline.stage import Stage

    @stage_io(reads=("loaded", "feeds"), writes=("graph",))
    def declared(state: RunState) -> None:
        state.graph = state.feed, state.loaded

    st = Stage("x", declared)
    assert st.io is not None and st.io.reads == ("feeds", "loaded")
    assert stage_accesses(declared) == Accesses(reads=frozenset({"feeds", "loaded"}),
                                                writes=frozenset({"graph"}))
    assert Stage("y", _stage_b).io is None
