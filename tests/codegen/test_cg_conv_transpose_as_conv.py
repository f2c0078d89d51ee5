"""ConvTransposeAsConv: a transposed convolution with a constant weight becomes one
ordinary convolution (the stride's phases as output channels) and a depth-to-space
shuffle, computing the same sums; the cases it does not cover keep the op."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import passinfra
from passinfra.build import COMPILE_PIPELINE, _passes
from passinfra.codegen.passes.conv_transpose_as_conv import conv_transpose_as_conv
from passinfra.errors import IRTypeError
from passinfra.frontend import from_onnx
from passinfra.ir.expr import Constant, Function, var
from passinfra.ir.module import IRModule
from passinfra.ir.op.extra import conv2d_transpose
from passinfra.transform import InferType, PassContext, Sequential
from tests.numerics import assert_sums_close


def _module(x_shape, weight, **attrs):
    x = var("x", x_shape, "float32")
    operand = Constant.owning(weight) if isinstance(weight, np.ndarray) else weight
    params = [x] if isinstance(weight, np.ndarray) else [x, weight]
    return InferType()(IRModule.from_expr(Function(params, conv2d_transpose(x, operand, **attrs))))


def _rewritten(mod):
    return InferType()(IRModule.from_expr(conv_transpose_as_conv(mod["main"], mod)))


@st.composite
def _cases(draw):
    kernel = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = tuple(draw(st.integers(0, k - 1)) for k in kernel * 2)
    output_padding = tuple(draw(st.integers(0, s - 1)) for s in strides)
    x_shape = tuple(draw(st.integers(1, top)) for top in (2, 4, 6, 6))
    return x_shape, (x_shape[1], draw(st.integers(1, 4)), *kernel), strides, padding, output_padding


@settings(max_examples=40, deadline=None)
@given(_cases(), st.integers(0, 2**31 - 1))
def test_the_rewrite_computes_the_transposed_convolution(case, seed):
    x_shape, w_shape, strides, padding, output_padding = case
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal(w_shape).astype("float32")
    try:
        mod = _module(x_shape, weight, strides=strides, padding=padding, output_padding=output_padding)
    except IRTypeError:  # an empty output: not a valid op
        return
    new = _rewritten(mod)
    assert "conv2d_transpose" not in str(new) and "nn.conv2d" in str(new)
    x = rng.standard_normal(x_shape).astype("float32")
    expected = np.asarray(passinfra.evaluate(mod, x))
    abs_mod = _module(x_shape, np.abs(weight), strides=strides, padding=padding,
                      output_padding=output_padding)
    magnitude = np.asarray(passinfra.evaluate(abs_mod, np.abs(x)))
    terms = w_shape[0] * w_shape[2] * w_shape[3]
    assert_sums_close(np.asarray(passinfra.evaluate(new, x)), expected, terms, magnitude)


@pytest.mark.parametrize("attrs", [{"groups": 2}, {"dilation": (2, 1)}, "weight operand"])
def test_what_the_rewrite_does_not_cover_keeps_the_op(attrs):
    weight = np.ones((4, 3, 2, 2), "float32")
    if attrs == "weight operand":
        mod = _module((1, 4, 5, 5), var("w", (4, 3, 2, 2), "float32"), strides=(2, 2))
    else:
        mod = _module((1, 4, 5, 5), weight, strides=(2, 2), **attrs)
    assert "nn.conv2d_transpose" in str(_rewritten(mod))


def _up_model():
    """An ONNX up-sampling block: 2x2 stride-2 ConvTranspose with bias, concat, 3x3 conv."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype("float32") * 0.3, name)
             for name, shape in (("up_w", (8, 4, 2, 2)), ("up_b", (4,)), ("w", (4, 8, 3, 3)))]
    nodes = [helper.make_node("ConvTranspose", ["x", "up_w", "up_b"], ["up"], kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Concat", ["up", "skip"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    value = helper.make_tensor_value_info
    inputs = [value("x", TensorProto.FLOAT, [1, 8, 6, 7]), value("skip", TensorProto.FLOAT, [1, 4, 12, 14])]
    graph = helper.make_graph(nodes, "up", inputs, [value("y", TensorProto.FLOAT, [1, 4, 12, 14])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_built_up_sampling_block_computes_what_the_interpreter_does(tmp_path):
    mod = from_onnx(_up_model())
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 8, 6, 7)).astype("float32")
    skip = rng.standard_normal((1, 4, 12, 14)).astype("float32")
    names = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("FuseOps")]
    with PassContext(opt_level=3):
        before_fusion = str(Sequential(_passes(names), opt_level=0)(mod))
    assert "conv2d_transpose" not in before_fusion and "nn.conv2d(" in before_fusion
    with PassContext(opt_level=3, config={"codegen.cache_dir": str(tmp_path)}):
        lib = passinfra.build(mod)
    expected = np.asarray(passinfra.evaluate(mod, x, skip))
    # each output sums 3*3*8 products of a weight and (an up value: 8 products and a bias)
    magnitude = np.asarray(passinfra.evaluate(from_onnx(_abs_model(_up_model())), np.abs(x), np.abs(skip)))
    assert_sums_close(np.asarray(lib(x, skip)), expected, 3 * 3 * 8 * 9, magnitude)


def _abs_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every initializer's absolute value (the magnitude of its sums)."""
    abs_model = onnx.ModelProto()
    abs_model.CopyFrom(model)
    for init in abs_model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(np.abs(numpy_helper.to_array(init)), init.name))
    return abs_model
