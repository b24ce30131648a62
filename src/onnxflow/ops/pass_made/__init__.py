"""The operators no model holds: only the compile passes (:mod:`onnxflow.compile.passes`) make
them, in the private domain :data:`FUSED_DOMAIN`. Their names live here, where the passes that
make the nodes and the kernels that run them (:mod:`.kernels`) both read them; importing this
module registers nothing.

- RowSquaredDistances 1: ``ReduceSumSquare(Sub(A, b), axes=[axis])``, made by
  :mod:`~onnxflow.compile.passes.fuse_distances`;
- FakeQuantize 1: ``DequantizeLinear(QuantizeLinear(x, s, z), s, z)``, made by
  :mod:`~onnxflow.compile.passes.fuse_qdq`;
- ShapeMemo 1: a group of nodes computing on shapes, run again only when the shapes change,
  made by :mod:`~onnxflow.compile.passes.memo_shapes`;
- ShapedReshape 1: a Reshape with the shape arithmetic making its target, which reshapes to
  the output shape of its last run while the shapes stay, made by
  :mod:`~onnxflow.compile.passes.memo_shapes`;
- FoldBatchNorm 1: a Conv's weight and bias with the BatchNormalization after it folded in,
  made by :mod:`~onnxflow.compile.passes.fold_batch_norm`;
- HalfRound 1: a value rounded to float16 and held in float32, made by
  :mod:`~onnxflow.compile.passes.half`;
- HalfTable 1: elementwise nodes computing on one float16 value, looked up in a table of
  their results for all 65536 float16 values, made by :mod:`~onnxflow.compile.passes.half_tables`;
- Pointwise 1: a group of float32 elementwise nodes run as one compiled region, made by
  :mod:`~onnxflow.compile.passes.pointwise`;
- PrimitiveLayerNorm 1, PrimitiveRMSNorm 1: LayerNorm and RMSNorm over the last axis written
  as primitives (ReduceMean, Sub, Pow, Add, Sqrt, Div, ...), made by
  :mod:`~onnxflow.compile.passes.fuse_norms`;
- MatMulBias 1: a MatMul and the Add of a constant bias that alone reads it, made by
  :mod:`~onnxflow.compile.passes.fuse_matmul_bias`;
- QDQConv 1: ``QuantizeLinear(Conv(DequantizeLinear(x), DequantizeLinear(w), ...))``, made by
  :mod:`~onnxflow.compile.passes.fuse_qdq_conv`;
- ConvActivation 1: a Conv with the Relu or HardSigmoid after it, onnxruntime's FusedConv,
  made by :mod:`~onnxflow.compile.passes.fuse_conv_activation`;
- ScaledDotProductAttention 1: ``MatMul(Q, K^T)``, its scaling, mask Add, Softmax and
  ``MatMul(., V)`` as one node, made by :mod:`~onnxflow.compile.passes.fuse_attention`.
"""

from __future__ import annotations

#: The private domain of the nodes the passes make (never in a model).
FUSED_DOMAIN = "onnxflow.fused"

#: The exponents Pow computes by products in double (ops/elementwise.py), the ones a
#: ``Pointwise`` region's "pow" instruction computes: the pass admits a Pow by these alone.
SMALL_POWERS = frozenset((-4, -3, -2, 3, 4))

ROW_SQUARED_DISTANCES = "RowSquaredDistances"
FAKE_QUANTIZE = "FakeQuantize"
SHAPE_MEMO = "ShapeMemo"
SHAPED_RESHAPE = "ShapedReshape"
FOLD_BATCH_NORM = "FoldBatchNorm"
HALF_ROUND = "HalfRound"
HALF_TABLE = "HalfTable"
POINTWISE = "Pointwise"
PRIMITIVE_LAYER_NORM = "PrimitiveLayerNorm"
PRIMITIVE_RMS_NORM = "PrimitiveRMSNorm"
MATMUL_BIAS = "MatMulBias"
QDQ_CONV = "QDQConv"
#: The roles of a QDQConv node's inputs, in the order of its ``slots`` attribute.
QDQ_ROLES = ("x", "sx", "zx", "w", "sw", "zw", "b", "sb", "zb", "sy", "zy")
CONV_ACTIVATION = "ConvActivation"
SCALED_DOT_PRODUCT_ATTENTION = "ScaledDotProductAttention"
#: The roles of a ScaledDotProductAttention node's inputs, in the order of its ``slots``
#: attribute (each the index of the input playing it, -1 when the chain has none).
ATTENTION_ROLES = ("q", "k", "v", "mask", "q_scale", "k_scale", "scale", "fill")
