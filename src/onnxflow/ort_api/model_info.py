"""What a session shows of its model in onnxruntime's terms: its metadata and its inputs' and
outputs' shapes."""

from __future__ import annotations

from typing import Any

from onnxflow.values import NodeArg, type_shape


class ModelMetadata:
    """A model's metadata, with onnxruntime's attribute names."""

    def __init__(self, model: Any) -> None:
        self.producer_name: str = model.producer_name
        self.graph_name: str = model.graph.name
        self.domain: str = model.domain
        self.description: str = model.doc_string
        self.graph_description: str = model.graph.doc_string
        #: as onnxruntime gives it: the largest int64 when the model sets no version
        self.version: int = model.model_version if model.HasField("model_version") else 2**63 - 1
        self.custom_metadata_map: dict[str, str] = {p.key: p.value for p in model.metadata_props}

    def __repr__(self) -> str:
        return (
            f"ModelMetadata(producer_name={self.producer_name!r}, graph_name={self.graph_name!r})"
        )


def ort_node_arg(arg: NodeArg) -> NodeArg:
    """``arg`` as onnxruntime shows it: an unranked tensor or a sequence or map has shape
    ``[]``, an optional tensor the shape of the tensor."""
    if arg.shape is not None:
        return arg
    tp = arg.type_proto
    if tp is not None and tp.WhichOneof("value") == "optional_type":
        return NodeArg(arg.name, arg.type, type_shape(tp.optional_type.elem_type) or [], tp)
    return NodeArg(arg.name, arg.type, [], tp)
