"""Property-based fuzzing of the ONNX GELU rewrites (hypothesis).

Random small graphs mix GELU spellings, decoys and ordinary ops; for a target drawn from
every profile and `--gelu keep`, the graph rewritten by the passes the API runs
(`run_onnx_passes` then `fit_to_profile`, then the static `incompatibilities` check) must:

- compute what the input computed, in ONNX Runtime (fp32: |Δ| ≤ 1e-5·scale or rel ≤ 1e-4;
  fp16: |Δ| ≤ 1e-2·scale or rel ≤ 1e-2; NaN/inf where the input has them);
- report exactly the GELU sites the generator planted (by kind: exact, tanh, quick), and
  none of the decoys;
- pass onnx.checker and fit the target's profile.

Spellings (each commutative operand order drawn at random; constants as initializers, as
the dynamo exporter writes them, or as `Constant` nodes, as the TorchScript exporter does):
the dynamo erf shape `Div Erf Add Mul(0.5,·) Mul(x,·)`, the TorchScript erf shape
`Div Erf Add Mul(x,·) Mul(·,0.5)`, HF `gelu_python` `(x·0.5)·(1+erf)`, TF `Mul(0.7071)`,
the dynamo tanh shape with `Pow(x,3)`, the TorchScript tanh shape with `x·x·x`, `gelu_new`,
Bloom/`gelu_fast` (factored), Megatron (distributed), ONNX `Gelu` (opset 20, both kinds),
`com.microsoft` Gelu/FastGelu, QuickGELU (its own kind), each in fp32 or fp16 and, in fp16
graphs, optionally as an fp32 Cast island. Decoys: wrong √2, wrong 0.044715, wrong 0.5,
QuickGELU with α = 1.5, and a true GELU formula one of whose intermediates has another
consumer (shared intermediate: must not be rewritten). Ordinary ops: MatMul, Add, Mul, Sub,
Relu, Tanh, Sigmoid. A second property draws random subsets of the branches of the real
TorchScript-exported spelling zoo (tests/onnx_graphs.py) at opsets 13 and 17, and a third
runs `export_gelu.export` itself on random graphs saved as .onnx files.

How many examples: the hypothesis profile's `max_examples` (profiles in tests/conftest.py:
`ci` 500, seeded, the default; `fast` 60 for `make test-fast`; `nightly` 5000 with new examples
each run, `make fuzz`) is the main property's count, split over its items (one per group of
targets, so that pytest-xdist runs them side by side); the other forms take a third of it,
one item per form; the zoo subsets a fifth, the API a thirtieth. Each item prints its count.
"""

from __future__ import annotations

import copy
import math
import zlib
from collections import Counter

import numpy as np
import onnx
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from export_gelu.parse_check import incompatibilities
from export_gelu.passes.compat import fit_to_profile
from export_gelu.passes.onnx import run_onnx_passes
from export_gelu.passes.onnx.plugin_form import plugin_refusal
from export_gelu.passes.onnx.plugin_math import plugins_as_math
from export_gelu.targets import PROFILES
from tests.onnx_graphs import G

#: The main property's examples: the loaded hypothesis profile's (tests/conftest.py).
EXAMPLES = settings.default.max_examples
TARGETS = sorted(PROFILES)
#: The main property's items: the targets by parser generation (each item draws from one).
TARGET_GROUPS = {
    "trt7": [t for t in TARGETS if t.startswith("trt7")],
    "trt8.0-8.4": ["trt8.0", "trt8.2", "trt8.4"],
    "trt8.5-9": ["trt8.5", "trt8.6", "trt9"],
    "trt10+ onnx ort": ["trt10", "trt11", "onnx", "ort"],
}
#: The --gelu forms other than keep, one item each.
OTHER_FORMS = ("erf", "tanh", "sigmoid", "plugin")
E = 16
SHAPE = [2, 3, E]
SQRT2 = math.sqrt(2.0)
C = math.sqrt(2.0 / math.pi)


# ------------------------------------------------------------------------ the graph builder


class Graph(G):
    """A graph under construction (tests.onnx_graphs.G), with the sites it is known to hold
    and operand orders drawn at random."""

    def __init__(self, draw: object, dtype: int, opset: int, const_nodes: bool) -> None:
        super().__init__(dtype, opset, const_nodes)
        self.draw = draw  # hypothesis `data.draw`
        self.sites: list[str] = []  # kinds planted
        self.extra_outputs: list[str] = []

    def comm(self, op: str, a: str, b: str) -> str:
        """A commutative op with its operand order drawn at random."""
        if self.draw(st.booleans()):
            a, b = b, a
        return self.op(op, a, b)

    def mul(self, a: str, b: str) -> str:
        return self.comm("Mul", a, b)

    def add(self, a: str, b: str) -> str:
        return self.comm("Add", a, b)


# Spellings: (g, x, k) -> output, where k holds the constants (wrong ones for decoys).
EXACT_K = {"sqrt2": SQRT2, "half": 0.5, "inv_sqrt2": 1 / SQRT2}
TANH_K = {"c": C, "beta": 0.044715, "half": 0.5}


def erf_dynamo(g: Graph, x: str, k: dict) -> str:
    t = g.op("Erf", g.op("Div", x, g.c(k["sqrt2"])))
    return g.mul(x, g.mul(g.c(k["half"]), g.add(t, g.c(1.0))))


def erf_torchscript(g: Graph, x: str, k: dict) -> str:
    t = g.op("Erf", g.op("Div", x, g.c(k["sqrt2"])))
    return g.mul(g.mul(x, g.add(t, g.c(1.0))), g.c(k["half"]))


def erf_gelu_python(g: Graph, x: str, k: dict) -> str:
    half = g.mul(x, g.c(k["half"]))
    return g.mul(half, g.add(g.op("Erf", g.op("Div", x, g.c(k["sqrt2"]))), g.c(1.0)))


def erf_tf(g: Graph, x: str, k: dict) -> str:
    t = g.op("Erf", g.mul(x, g.c(k["inv_sqrt2"])))
    return g.mul(g.mul(g.c(k["half"]), x), g.add(g.c(1.0), t))


def tanh_dynamo_pow(g: Graph, x: str, k: dict) -> str:
    inner = g.mul(g.c(k["c"]), g.add(x, g.mul(g.c(k["beta"]), g.op("Pow", x, g.c(3.0)))))
    return g.mul(x, g.mul(g.c(k["half"]), g.add(g.op("Tanh", inner), g.c(1.0))))


def tanh_torchscript_cube(g: Graph, x: str, k: dict) -> str:
    cube = g.mul(x, g.mul(x, x))
    inner = g.mul(g.c(k["c"]), g.add(x, g.mul(g.c(k["beta"]), cube)))
    return g.mul(g.c(k["half"]), g.mul(x, g.add(g.c(1.0), g.op("Tanh", inner))))


def tanh_gelu_new(g: Graph, x: str, k: dict) -> str:
    half = g.mul(x, g.c(k["half"]))
    inner = g.mul(g.add(x, g.mul(g.op("Pow", x, g.c(3.0)), g.c(k["beta"]))), g.c(k["c"]))
    return g.mul(half, g.add(g.op("Tanh", inner), g.c(1.0)))


def tanh_factored(g: Graph, x: str, k: dict) -> str:  # Bloom / gelu_fast
    inner = g.mul(g.mul(g.c(k["c"]), x), g.add(g.c(1.0), g.mul(g.mul(g.c(k["beta"]), x), x)))
    return g.mul(g.mul(x, g.c(k["half"])), g.add(g.c(1.0), g.op("Tanh", inner)))


def tanh_megatron(g: Graph, x: str, k: dict) -> str:  # c·x + c·β·x³
    inner = g.add(g.mul(g.c(k["c"]), x), g.mul(g.c(k["c"] * k["beta"]), g.mul(g.mul(x, x), x)))
    return g.mul(g.mul(g.c(k["half"]), x), g.add(g.c(1.0), g.op("Tanh", inner)))


def quick_gelu(g: Graph, x: str, k: dict) -> str:
    return g.mul(x, g.op("Sigmoid", g.mul(g.c(k.get("alpha", 1.702)), x)))


FORMULAS = {
    "erf dynamo": ("exact", erf_dynamo, EXACT_K),
    "erf torchscript": ("exact", erf_torchscript, EXACT_K),
    "erf gelu_python": ("exact", erf_gelu_python, EXACT_K),
    "erf tf": ("exact", erf_tf, EXACT_K),
    "tanh dynamo pow": ("tanh", tanh_dynamo_pow, TANH_K),
    "tanh torchscript cube": ("tanh", tanh_torchscript_cube, TANH_K),
    "tanh gelu_new": ("tanh", tanh_gelu_new, TANH_K),
    "tanh factored": ("tanh", tanh_factored, TANH_K),
    "tanh megatron": ("tanh", tanh_megatron, TANH_K),
    "quick": ("quick", quick_gelu, {}),
}
#: Decoys: a formula with one constant wrong (not a GELU of any kind).
WRONG = {
    "erf dynamo": {"sqrt2": 1.3}, "erf torchscript": {"half": 0.6},
    "erf gelu_python": {"half": 0.4}, "erf tf": {"inv_sqrt2": 0.6},
    "tanh dynamo pow": {"beta": 0.05}, "tanh torchscript cube": {"c": 0.7},
    "tanh gelu_new": {"half": 0.6}, "tanh factored": {"beta": 0.03},
    "tanh megatron": {"c": 0.9}, "quick": {"alpha": 1.5},
}
ORDINARY_CONSTANTS = (-1.5, 0.25, 2.0, 0.75)


def _planted(g: Graph, x: str) -> str:
    """One true GELU/QuickGELU site, optionally as an fp32 island in an fp16 graph."""
    name = g.draw(st.sampled_from(sorted(FORMULAS)))
    kind, fn, k = FORMULAS[name]
    island = g.dtype == TensorProto.FLOAT16 and g.draw(st.booleans())
    if island:
        dtype, g.dtype = g.dtype, TensorProto.FLOAT
        y = g.op("Cast", fn(g, g.op("Cast", x, to=TensorProto.FLOAT), dict(k)), to=dtype)
        g.dtype = dtype
    else:
        y = fn(g, x, dict(k))
    g.sites.append(kind)
    return y


def _gelu_op(g: Graph, x: str) -> str:
    choices = ["ms Gelu", "ms FastGelu"] + (["onnx exact", "onnx tanh"] if g.opset >= 20 else [])
    choice = g.draw(st.sampled_from(choices))
    if choice.startswith("ms "):
        g.sites.append("exact" if choice == "ms Gelu" else "tanh")
        return g.op(choice[3:], x, domain="com.microsoft")
    g.sites.append("tanh" if choice == "onnx tanh" else "exact")
    return g.op("Gelu", x, approximate="tanh") if choice == "onnx tanh" else g.op("Gelu", x)


def _wrong_constant(g: Graph, x: str) -> str:
    name = g.draw(st.sampled_from(sorted(FORMULAS)))
    _kind, fn, k = FORMULAS[name]
    return fn(g, x, {**k, **WRONG[name]})


def _shared_intermediate(g: Graph, x: str) -> str:
    """A true GELU formula whose Erf/Tanh output also feeds a graph output: not rewritable."""
    name = g.draw(st.sampled_from([n for n in FORMULAS if n != "quick"]))
    _kind, fn, k = FORMULAS[name]
    start = len(g.nodes)
    y = fn(g, x, dict(k))
    inner = [n.output[0] for n in g.nodes[start:] if n.op_type in ("Erf", "Tanh")][0]
    g.extra_outputs.append(g.op("Mul", inner, g.c(ORDINARY_CONSTANTS[1])))
    return y


def _ordinary(g: Graph, x: str) -> str:
    op = g.draw(st.sampled_from(["MatMul", "Add", "Mul", "Sub", "Relu", "Tanh", "Sigmoid"]))
    if op == "MatMul":
        seed = g.draw(st.integers(0, 2 ** 16))
        w = np.random.default_rng(seed).standard_normal((E, E)) * 0.25
        return g.op("MatMul", x, g.c(w))
    if op in ("Relu", "Tanh", "Sigmoid"):
        return g.op(op, x)
    value = g.draw(st.sampled_from(ORDINARY_CONSTANTS))
    if op == "Sub":
        return g.op("Sub", x, g.c(value))
    return g.comm(op, x, g.c(value))


def build_graph(draw) -> tuple[onnx.ModelProto, Graph]:
    dtype = draw(st.sampled_from([TensorProto.FLOAT, TensorProto.FLOAT16]))
    opset = draw(st.sampled_from([13, 17, 18, 20]))
    g = Graph(draw, dtype, opset, const_nodes=draw(st.booleans()))
    x = "x"
    tensors = [x]
    blocks = ["planted", "planted", "ordinary", "ordinary", "wrong", "shared", "gelu op"]
    for _ in range(draw(st.integers(1, 6))):
        block = draw(st.sampled_from(blocks))
        src = draw(st.sampled_from(tensors))
        make = {"planted": _planted, "ordinary": _ordinary, "wrong": _wrong_constant,
                "shared": _shared_intermediate, "gelu op": _gelu_op}[block]
        tensors.append(make(g, src))
    outputs = [tensors[-1]] + [t for t in tensors[1:-1] if draw(st.booleans())]
    outputs += g.extra_outputs
    graph = helper.make_graph(
        g.nodes, "fuzz", [helper.make_tensor_value_info("x", dtype, SHAPE)],
        [helper.make_tensor_value_info(o, dtype, SHAPE) for o in dict.fromkeys(outputs)],
        initializer=g.inits)
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in g.domains]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model)
    return model, g


# ------------------------------------------------------------------------ checking a rewrite


def run_ort(model: onnx.ModelProto, feed: dict[str, np.ndarray], optimize: bool = False
            ) -> list[np.ndarray]:
    """Outputs in ORT CPU; by default with graph optimizations off (the graph as written)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def run_ort_optimized(model: onnx.ModelProto, feed: dict[str, np.ndarray]
                      ) -> list[np.ndarray] | None:
    """Outputs with ORT's own optimizer on; None when ORT cannot load the graph that way
    (its FastGelu fusion breaks graphs where ORT merged a shared x·0.5 node: see
    docs/safety.md, "Rewrite fuzzing")."""
    try:
        return run_ort(model, feed, optimize=True)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's InvalidArgument and others
        if "is not a graph input, initializer, or output of a previous node" in str(exc):
            return None
        raise


def assert_same(ref: list[np.ndarray], got: list[np.ndarray], fp16: bool, what: str) -> None:
    atol_k, rtol = (1e-2, 1e-2) if fp16 else (1e-5, 1e-4)
    for i, (r, o) in enumerate(zip(ref, got)):
        r64, o64 = r.astype(np.float64), o.astype(np.float64)
        assert r.shape == o.shape, (what, i)
        finite = np.isfinite(r64)
        assert np.array_equal(finite, np.isfinite(o64)), (what, i, "non-finite pattern differs")
        if not finite.any():
            continue
        scale = max(1.0, float(np.abs(r64[finite]).max()))
        diff = np.abs(r64[finite] - o64[finite])
        bad = (diff > atol_k * scale) & (diff > rtol * np.abs(r64[finite]))
        assert not bad.any(), (what, f"output {i}: max abs {diff.max():.3g} (scale {scale:.3g})")


def rewrite_for(model: onnx.ModelProto, target: str, precision: str
                ) -> tuple[onnx.ModelProto, list]:
    """What `export-gelu model.onnx --target T` does to the graph, minus file handling."""
    profile = PROFILES[target]
    out, sites = run_onnx_passes(copy.deepcopy(model), profile, "keep", precision)
    out, _notes = fit_to_profile(out, profile)
    return out, sites


def check_rewrite(model: onnx.ModelProto, planted: list[str], target: str, fp16: bool) -> None:
    rng = np.random.default_rng(0)
    dtype = np.float16 if fp16 else np.float32
    feed = {"x": (rng.standard_normal(SHAPE) * 2).astype(dtype)}
    ref = run_ort(model, feed)
    out, sites = rewrite_for(model, target, "fp16" if fp16 else "fp32")
    assert Counter(s.kind for s in sites) == Counter(planted), (target, [
        (s.kind, s.source) for s in sites], planted)
    onnx.checker.check_model(out)
    assert incompatibilities(out, PROFILES[target]) == [], target
    assert_same(ref, run_ort(out, feed), fp16, target)
    # as deployed: ORT's optimizer on; what loaded before the rewrite must load after it
    ref_opt = run_ort_optimized(model, feed)
    if ref_opt is not None:
        got_opt = run_ort_optimized(out, feed)
        assert got_opt is not None, (target, "ORT loads the input but not the rewrite")
        assert_same(ref_opt, got_opt, fp16, target + " (ORT optimizer on)")


class Count:
    """How many examples a property ran (printed at the end of each test)."""

    def __init__(self) -> None:
        self.examples = 0
        self.sites: Counter[str] = Counter()
        self.targets: Counter[str] = Counter()


def _report(capsys: pytest.CaptureFixture, name: str, count: Count) -> None:
    with capsys.disabled():
        print(f"\n[fuzz] {name}: {count.examples} examples, sites planted "
              f"{dict(count.sites)}, targets {len(count.targets)}/{len(TARGETS)}")


# ------------------------------------------------------------------------ the properties


def _own_examples(item: str):  # noqa: ANN202 - a decorator
    """Under a seeded profile (`derandomize`), the split items of one property would draw the
    same examples: give each item its own seed, from its name (still the same every run)."""
    if not settings.default.derandomize:
        return lambda test: test
    return seed(zlib.crc32(item.encode()))


def test_the_target_groups_hold_every_target_once():
    assert sorted(t for group in TARGET_GROUPS.values() for t in group) == TARGETS


@pytest.mark.parametrize("group", list(TARGET_GROUPS))
def test_fuzz_random_graphs_keep_their_math_for_every_target(capsys, group):
    count = Count()
    examples = max(5, EXAMPLES // len(TARGET_GROUPS))

    @_own_examples(group)
    @settings(max_examples=examples)
    @given(st.data())
    def prop(data):
        model, g = build_graph(data.draw)
        target = data.draw(st.sampled_from(TARGET_GROUPS[group]), label="target")
        count.examples += 1
        count.sites.update(g.sites)
        count.targets[target] += 1
        check_rewrite(model, g.sites, target, g.dtype == TensorProto.FLOAT16)

    prop()
    _report(capsys, f"random graphs × targets {group}, --gelu keep", count)
    assert count.examples >= min(examples, 50)


@pytest.mark.parametrize("form", OTHER_FORMS)
def test_fuzz_other_forms_stay_valid_and_bounded(capsys, form):
    """--gelu erf|tanh|sigmoid|plugin change the math on purpose; the rewrite must still be
    a valid graph that fits the target, report the planted sites, and stay within the form's
    worst-case error, with headroom for the amplification of the ops around each site (plugin
    nodes run in ORT as their math, bias read as the plugin reads it; the plugin's targets
    are those that build it)."""
    from export_gelu.passes.sites import FORM_MAX_ERROR

    count = Count()
    targets = [t for t in TARGETS if form != "plugin" or not plugin_refusal(PROFILES[t])]

    @_own_examples(form)
    @settings(max_examples=max(5, EXAMPLES // 3 // len(OTHER_FORMS)))
    @given(st.data())
    def prop(data):
        model, g = build_graph(data.draw)
        target = data.draw(st.sampled_from(targets), label="target")
        profile = PROFILES[target]
        fp16 = g.dtype == TensorProto.FLOAT16
        count.examples += 1
        count.sites.update(g.sites)
        count.targets[target] += 1
        out, sites = run_onnx_passes(copy.deepcopy(model), profile, form,
                                     "fp16" if fp16 else "fp32")
        out, _notes = fit_to_profile(out, profile)
        assert Counter(s.kind for s in sites) == Counter(g.sites), (target, form)
        onnx.checker.check_model(out)
        assert incompatibilities(out, profile) == [], (target, form)
        if form == "plugin":
            assert plugins_as_math(out) == sum(k != "quick" for k in g.sites)
        feed = {"x": (np.random.default_rng(0).standard_normal(SHAPE) * 2).astype(
            np.float16 if fp16 else np.float32)}
        ref, got = run_ort(model, feed), run_ort(out, feed)
        worst = max(FORM_MAX_ERROR["sigmoid" if form == "sigmoid" else "tanh"], 1e-3)
        for r, o in zip(ref, got):
            r64, o64 = r.astype(np.float64), o.astype(np.float64)
            finite = np.isfinite(r64)
            assert np.array_equal(finite, np.isfinite(o64)), (target, form)
            scale = max(1.0, float(np.abs(r64[finite]).max(initial=0.0)))
            bound = 50 * worst * max(1, len(g.sites)) * scale + (2e-2 * scale if fp16 else 0)
            assert float(np.abs(r64 - o64)[finite].max(initial=0.0)) <= bound, (target, form)

    prop()
    _report(capsys, f"random graphs × targets × --gelu {form}", count)


def _prune(model: onnx.ModelProto, keep: list[str]) -> onnx.ModelProto:
    """The model computing only the outputs `keep` (dead nodes and initializers dropped)."""
    m = copy.deepcopy(model)
    outs = [o for o in m.graph.output if o.name in keep]
    del m.graph.output[:]
    m.graph.output.extend(outs)
    needed = set(keep)
    live = []
    for node in reversed(m.graph.node):
        if any(o in needed for o in node.output):
            live.append(node)
            needed.update(node.input)
    del m.graph.node[:]
    m.graph.node.extend(reversed(live))
    inits = [i for i in m.graph.initializer if i.name in needed]
    del m.graph.initializer[:]
    m.graph.initializer.extend(inits)
    return m


def test_fuzz_subsets_of_the_exported_zoo(capsys):
    from tests.onnx_graphs import SPELLING_NAMES, exported_zoo, spelling_kinds

    kinds = spelling_kinds()
    zoos = {opset: exported_zoo("torchscript", opset) for opset in (13, 17)}
    count = Count()

    @settings(max_examples=max(10, EXAMPLES // 5))
    @given(st.data())
    def prop(data):
        opset = data.draw(st.sampled_from(sorted(zoos)), label="opset")
        chosen = data.draw(st.lists(st.integers(0, len(SPELLING_NAMES) - 1), min_size=1,
                                    max_size=4, unique=True), label="branches")
        target = data.draw(st.sampled_from(TARGETS), label="target")
        model = _prune(zoos[opset], [f"y{i}" for i in chosen])
        planted = [kinds[SPELLING_NAMES[i]] for i in chosen]
        count.examples += 1
        count.sites.update(planted)
        count.targets[target] += 1
        rng = np.random.default_rng(0)
        feed = {"x": (rng.standard_normal([2, 4, 16]) * 2).astype(np.float32)}
        ref = run_ort(model, feed)
        out, sites = rewrite_for(model, target, "fp32")
        assert Counter(s.kind for s in sites) == Counter(planted), (target, chosen)
        assert incompatibilities(out, PROFILES[target]) == [], target
        assert_same(ref, run_ort(out, feed), False, target)

    prop()
    _report(capsys, "exported zoo subsets × targets", count)


def test_fuzz_through_the_export_api(capsys, tmp_path_factory):
    """The same property through `export_gelu.export` on a saved .onnx (parity by the API)."""
    from export_gelu import export

    count = Count()

    @settings(max_examples=max(5, EXAMPLES // 30))
    @given(st.data())
    def prop(data):
        model, g = build_graph(data.draw)
        target = data.draw(st.sampled_from(TARGETS), label="target")
        folder = tmp_path_factory.mktemp("fuzz_api")
        src = folder / "in.onnx"
        onnx.save(model, str(src))
        fp16 = g.dtype == TensorProto.FLOAT16
        rep = export(src, target=target, output=folder / "out.onnx", iterations=0,
                     precision="fp16" if fp16 else "fp32")
        count.examples += 1
        count.sites.update(g.sites)
        count.targets[target] += 1
        assert Counter(s.kind for s in rep.gelu_sites) == Counter(g.sites)
        assert rep.parity.status == "passed", rep.parity.reason

    prop()
    _report(capsys, "export_gelu.export on .onnx files", count)


def test_gelu_op_of_contrib_op_output_is_lowered():
    """Found by the fuzzer: ms.Gelu(ms.Gelu(x)) → Relu. ONNX shape inference cannot type a
    com.microsoft op's output, so the second Gelu's input type was unknown and it was kept,
    leaving trt8.6 an op it cannot parse. Types now flow through contrib GELU ops."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, E])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, E])
    nodes = [helper.make_node("Gelu", ["x"], ["g1"], name="gelu_a", domain="com.microsoft"),
             helper.make_node("Gelu", ["g1"], ["g2"], name="gelu_b", domain="com.microsoft"),
             helper.make_node("Relu", ["g2"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    out, sites = rewrite_for(model, "trt8.6", "fp32")
    assert incompatibilities(out, PROFILES["trt8.6"]) == []
