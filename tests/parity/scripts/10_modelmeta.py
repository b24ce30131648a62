"""get_modelmeta: producer, graph name, domain, description, version, custom metadata."""

import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])
graph = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "meta_graph", [X], [Y])
model = helper.make_model(
    graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="parity-producer"
)
model.ir_version = 8
model.domain = "ai.example"
model.doc_string = "A model with metadata"
model.model_version = 42
helper.set_model_props(model, {"author": "me", "license": "MIT"})

sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
meta = sess.get_modelmeta()
print(meta.producer_name, meta.graph_name, meta.domain, meta.description, meta.version)
print(sorted(meta.custom_metadata_map.items()))
print(repr(meta.graph_description))

graph2 = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "bare", [X], [Y])
bare = helper.make_model(graph2, opset_imports=[helper.make_opsetid("", 17)])
bare.ir_version = 8
meta2 = ort.InferenceSession(
    bare.SerializeToString(), providers=["CPUExecutionProvider"]
).get_modelmeta()
print(
    repr(meta2.producer_name),
    meta2.graph_name,
    repr(meta2.domain),
    meta2.version,
    meta2.custom_metadata_map,
)
