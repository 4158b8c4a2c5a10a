"""The one graph (`export_gelu.graph`): what graphsurgeon's exporter would drop survives a
save, the index counts subgraph reads, weights left in their file stay references, and edits
keep the links right."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_gelu import graph as G
from export_gelu import onnx_weights

F = TensorProto.FLOAT


def _model(nodes, inits=(), inputs=None, outputs=None, opset=17) -> onnx.ModelProto:
    inputs = inputs if inputs is not None else [helper.make_tensor_value_info("x", F, [2, 3])]
    outputs = outputs if outputs is not None else [helper.make_tensor_value_info("y", F, [2, 3])]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _chain() -> onnx.ModelProto:
    """y = Relu(x * w + b), with metadata, a doc string, an unused weight, value infos."""
    w = numpy_helper.from_array(np.full((2, 3), 2.0, np.float32), "w")
    b = numpy_helper.from_array(np.ones(3, np.float32), "b")
    spare = numpy_helper.from_array(np.arange(4, dtype=np.float32), "spare")
    mul = helper.make_node("Mul", ["x", "w"], ["m"], name="mul")
    mul.metadata_props.add(key="pkg.torch.onnx.name_scopes", value="['', 'layer', 'mul']")
    mul.doc_string = "the product"
    add = helper.make_node("Add", ["m", "b"], ["a"], name="add")
    relu = helper.make_node("Relu", ["a"], ["y"], name="relu")
    model = _model([mul, add, relu], [w, spare, b])
    model.graph.value_info.append(helper.make_tensor_value_info("m", F, [2, 3]))
    model.metadata_props.add(key="owner", value="team-a")
    return model


def test_load_and_save_without_edits_changes_no_byte():
    model = _chain()
    before = model.SerializeToString()
    G.save(G.load(model), model)
    assert model.SerializeToString() == before


def test_a_changed_node_keeps_metadata_and_the_rest_stays():
    model = _chain()
    graph = G.load(model)
    mul = G.node_named(graph)["mul"]
    new = G.clone(graph, mul)
    new.op = "Div"  # changed: written anew, its metadata and doc string carried over
    G.set_nodes(graph, [new if n is mul else n for n in graph.nodes])
    G.save(graph, model)
    (div,) = [n for n in model.graph.node if n.name == "mul"]
    assert div.op_type == "Div" and div.doc_string == "the product"
    assert [(p.key, p.value) for p in div.metadata_props] == [
        ("pkg.torch.onnx.name_scopes", "['', 'layer', 'mul']")]
    assert [t.name for t in model.graph.initializer] == ["w", "spare", "b"]  # order, unused
    assert [v.name for v in model.graph.value_info] == ["m"]
    assert model.metadata_props[0].value == "team-a"
    ort_out = _run(model, {"x": np.full((2, 3), 4.0, np.float32)})
    assert np.allclose(ort_out, 3.0)  # relu(4 / 2 + 1)


def test_a_dropped_node_takes_the_constants_only_it_read():
    c = helper.make_node("Constant", [], ["c"], name="c", value=numpy_helper.from_array(
        np.array(3.0, np.float32)))
    mul = helper.make_node("Mul", ["x", "c"], ["m"], name="mul")
    add = helper.make_node("Add", ["m", "w"], ["y"], name="add")
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    model = _model([c, mul, add], [w, numpy_helper.from_array(np.ones(1, np.float32), "u")])
    graph = G.load(model)
    nodes = G.node_named(graph)
    ident = G.node(graph, "Identity", [graph.inputs[0]], outputs=[nodes["mul"].outputs[0]])
    G.set_nodes(graph, [ident if n is nodes["mul"] else n for n in graph.nodes])
    G.save(graph, model)
    assert [n.op_type for n in model.graph.node] == ["Identity", "Add"]  # Constant gone
    assert [t.name for t in model.graph.initializer] == ["w", "u"]  # u was never read


def test_an_initializer_that_is_a_graph_input_stays_an_input():
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    inputs = [helper.make_tensor_value_info("x", F, [2, 3]),
              helper.make_tensor_value_info("w", F, [2, 3])]
    model = _model([helper.make_node("Mul", ["x", "w"], ["y"], name="mul")], [w], inputs)
    graph = G.load(model)
    (mul,) = graph.nodes
    assert G.overridable(graph, mul.inputs[1]) and not G.is_constant(graph, mul.inputs[1])
    assert G.literal(graph, mul.inputs[1]) is None  # a feed may replace it
    new = G.clone(graph, mul)
    new.op = "Add"
    G.set_nodes(graph, [new])
    G.save(graph, model)
    assert [i.name for i in model.graph.input] == ["x", "w"]
    assert [t.name for t in model.graph.initializer] == ["w"]


def _if_model() -> onnx.ModelProto:
    """t = x + 1 is read by the main graph and inside both branches of an If."""
    one = numpy_helper.from_array(np.ones((2, 3), np.float32), "one")
    add = helper.make_node("Add", ["x", "one"], ["t"], name="add")
    then = helper.make_graph([helper.make_node("Neg", ["t"], ["a"], name="neg")], "then", [],
                             [helper.make_tensor_value_info("a", F, [2, 3])])
    then.node[0].metadata_props.add(key="scope", value="then")
    other = helper.make_graph([helper.make_node("Abs", ["t"], ["b"], name="abs")], "else", [],
                              [helper.make_tensor_value_info("b", F, [2, 3])])
    cond = numpy_helper.from_array(np.array(True), "cond")
    if_node = helper.make_node("If", ["cond"], ["z"], name="if", then_branch=then,
                               else_branch=other)
    relu = helper.make_node("Relu", ["t"], ["r"], name="relu")
    out = helper.make_node("Add", ["z", "r"], ["y"], name="out")
    return _model([add, if_node, relu, out], [one, cond])


def test_subgraph_reads_count_as_users_and_the_walk_sees_them():
    graph = G.load(_if_model())
    t = G.node_named(graph)["add"].outputs[0]
    assert G.users(graph, t) == 3  # Relu, and the Neg and Abs of the branches
    assert sorted(n.op for n in G.walk(graph)) == ["Abs", "Add", "Add", "If", "Neg", "Relu"]


def test_a_node_changed_inside_a_branch_keeps_its_metadata():
    model = _if_model()
    graph = G.load(model)
    then = G.node_named(graph)["if"].attrs["then_branch"]
    (neg,) = then.nodes
    neg.op = "Abs"
    G.save(graph, model)
    branch = next(a.g for a in model.graph.node[1].attribute if a.name == "then_branch")
    assert branch.node[0].op_type == "Abs"
    assert [(p.key, p.value) for p in branch.node[0].metadata_props] == [("scope", "then")]
    assert not branch.initializer  # the outer initializer read inside stays outer
    y = _run(model, {"x": np.full((2, 3), -3.0, np.float32)})
    assert np.allclose(y, 2.0)  # |−2| + relu(−2)


def test_a_local_function_and_sparse_initializer_no_pass_touched_stay():
    fn = helper.make_function("local", "Twice", ["a"], ["b"],
                              [helper.make_node("Add", ["a", "a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([5.0], np.float32), "s"),
        numpy_helper.from_array(np.array([1], np.int64)), [3])
    model = _model([helper.make_node("Twice", ["x"], ["y"], name="call", domain="local")])
    model.functions.append(fn)
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.graph.sparse_initializer.append(sparse)
    before = model.SerializeToString()
    graph = G.load(model)
    assert [n.op for f in graph.functions for n in f.nodes] == ["Add"]
    G.save(graph, model)
    assert model.SerializeToString() == before


def test_a_new_nodes_domain_is_imported_and_the_opset_follows():
    model = _chain()
    graph = G.load(model)
    relu = G.node_named(graph)["relu"]
    gelu = G.node(graph, "Gelu", list(relu.inputs), outputs=list(relu.outputs),
                  domain="com.microsoft", like=relu)
    G.set_nodes(graph, [gelu if n is relu else n for n in graph.nodes])
    G.set_opset(graph, 16)
    G.save(graph, model)
    assert {(i.domain, i.version) for i in model.opset_import} == {("", 16),
                                                                 ("com.microsoft", 1)}


def test_inference_types_contrib_gelu_ops_and_constants():
    nodes = [helper.make_node("Gelu", ["x"], ["g"], domain="com.microsoft", name="gelu"),
             helper.make_node("Add", ["g", "w"], ["y"], name="add")]
    model = _model(nodes, [numpy_helper.from_array(np.ones((2, 3), np.float32), "w")],
                   outputs=[helper.make_tensor_value_info("y", F, None)])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    graph = G.load(model)
    assert G.type_of(graph, "g") == G.TensorType(F, (2, 3))
    assert G.type_of(graph, "y") == G.TensorType(F, (2, 3))
    assert G.type_of(graph, "w") == G.TensorType(F, (2, 3))


def test_a_weight_left_in_its_file_is_read_only_when_asked(tmp_path):
    big = np.arange(300_000, dtype=np.float32)
    model = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                   [numpy_helper.from_array(big, "w")],
                   [helper.make_tensor_value_info("x", F, [300_000])],
                   [helper.make_tensor_value_info("y", F, [300_000])])
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="m.onnx.data")
    lazy = onnx_weights.load_graph(path)
    refs = [list(t.external_data) for t in lazy.graph.initializer]
    graph = G.load(lazy)
    w = graph.nodes[0].inputs[1]
    assert G.is_weights(w) and G.value(w) is None  # not read: it stays in its file
    assert np.array_equal(G.value(w, external=True), big)
    new = G.clone(graph, graph.nodes[0])
    new.op = "Sub"
    G.set_nodes(graph, [new])
    G.save(graph, lazy)
    assert [list(t.external_data) for t in lazy.graph.initializer] == refs


def test_an_abandoned_clone_leaves_the_original_linked():
    """graphsurgeon's lists remove by equality, and an unchanged clone equals its original:
    the helpers unlink by identity."""
    model = _chain()
    graph = G.load(model)
    add = G.node_named(graph)["add"]
    m = add.inputs[0]
    G.clone(graph, add)  # made, then not used
    G.set_nodes(graph, list(graph.nodes))
    assert [n is add for n in m.outputs] == [True]
    assert add.outputs[0].inputs[0] is add and len(add.outputs[0].inputs) == 1
    G.save(graph, model)
    assert [n.name for n in model.graph.node] == ["mul", "add", "relu"]


def test_unique_node_names_renames_in_the_graph_only():
    model = _chain()
    for node in model.graph.node:
        node.name = "same"
    graph = G.load(model)
    assert G.unique_node_names(graph) == 2
    assert len({n.name for n in graph.nodes}) == 3
    assert [n.name for n in model.graph.node] == ["same"] * 3  # until saved
    G.save(graph, model)
    assert len({n.name for n in model.graph.node}) == 3


def _run(model: onnx.ModelProto, feed: dict) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)[0]


def test_a_closed_graph_holds_none_of_the_models_protos():
    """graphsurgeon's nodes and tensors sit in reference cycles: a closed graph must not keep
    the model's weights (its TensorProtos) reachable until the cyclic collector runs."""
    model = _chain()
    with G.opened(model) as graph:
        w = G.node_named(graph)["mul"].inputs[1]
        assert G.proto_of(w) is model.graph.initializer[0]
        nodes = list(graph.nodes)
    assert w.__dict__ == {} and all(n.__dict__ == {} for n in nodes)
    assert [t.name for t in model.graph.initializer] == ["w", "spare", "b"]  # not written
