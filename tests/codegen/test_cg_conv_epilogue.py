"""A convolution's epilogue applied by the microkernels as they store the outputs
(passinfra/codegen/compute/conv_epilogue.py, the C runtime's rp_conv_epi): which epilogues
fuse, and that a fused one gives the same bits as the loop it replaces, on every
instruction-set level the CPU has, with NaNs, channel tails, groups and chunks of input
channels; and the TIR interpreter's meaning of the fused call."""

from __future__ import annotations

import numpy as np
import pytest

import passinfra
from passinfra import ir, tir
from passinfra.build import COMPILE_PIPELINE
from passinfra.codegen.compute.conv_epilogue import FUSE_CONFIG
from passinfra.codegen.compute.conv_microkernel import PANEL_WIDTH
from passinfra.codegen.compute.conv_plan import CONV_KERNEL_CONFIG
from passinfra.codegen.compute.conv_winograd import TILE_CONFIG
from passinfra.codegen.conv_runtime import CHANNEL_CHUNK
from passinfra.ir import op
from passinfra.ir.expr import Constant
from passinfra.ir.functor import iter_post_order
from passinfra.ir.op.extra import unary
from passinfra.ir.op.weight_panels import to_panels
from passinfra.runtime.module import CONV_ISA_LEVELS
from passinfra.tir.evaluator import run_prim_func
from passinfra.tir.intrinsics import ConvEpilogue, is_conv, is_winograd
from passinfra.transform import PassContext, Sequential, get_pass
from passinfra.transform.errors import PassConfigTypeError
from tests.codegen.test_cg_conv_kernels import _nodes


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("conv-epilogue-cache"))


def _hard_swish(y: ir.Expr) -> ir.Expr:
    return op.multiply(y, unary("nn.hard_sigmoid", y, alpha=1.0 / 6.0, beta=0.5))


def _bias(y: ir.Expr, b: ir.Expr) -> ir.Expr:
    return op.nn.bias_add(y, b, axis=3)


# (name, epilogue: y, bias, residual -> the graph, the activation fused or None for a loop)
FORMS = {
    "bias": (lambda y, b, r: _bias(y, b), "none"),
    "bias_relu": (lambda y, b, r: op.nn.relu(_bias(y, b)), "relu"),
    "bias_relu6": (lambda y, b, r: op.clip(_bias(y, b), 0.0, 6.0), "clip"),
    "bias_hard_swish": (lambda y, b, r: _hard_swish(_bias(y, b)), "hardswish"),
    "bias_residual_relu": (lambda y, b, r: op.nn.relu(op.add(_bias(y, b), r)), "relu"),
    "residual_then_bias_relu": (lambda y, b, r: op.nn.relu(_bias(op.add(y, r), b)), "relu"),
    "residual": (lambda y, b, r: op.add(y, r), "none"),
    # not one of the forms: a loop after the call
    "bias_sigmoid_gate": (lambda y, b, r: op.multiply(_bias(y, b), op.sigmoid(_bias(y, b))), None),
    "bias_relu_then_residual": (lambda y, b, r: op.add(op.nn.relu(_bias(y, b)), r), None),
    # a bound of -0.0: the runtime's max would differ from the loop's at +0.0
    "bias_clip_from_negative_zero": (lambda y, b, r: op.clip(_bias(y, b), -0.0, 6.0), None),
}

# (name, channels, out channels, kernel, groups, size[, the Winograd tile]): channel tails
# (masked vectors), groups (a tile's channel is its offset's), a pointwise GEMM, chunks of
# input channels (the epilogue applies after the last one only); depthwise (the four- and
# eight-pixel tiles and single pixels, whole vectors and a tail); a Winograd convolution,
# whose epilogue stays a loop (conv_epilogue's docstring)
SHAPES = {
    "3x3_tail21": (12, 21, 3, 1, 7),
    "1x1_tail61": (20, 61, 1, 1, 6),
    "3x3_grouped": (32, 32, 3, 2, 6),
    "3x3_chunks": (CHANNEL_CHUNK + 8, 16, 3, 1, 4),
    "3x3_depthwise_tail21": (21, 21, 3, 21, 9),
    "5x5_depthwise": (16, 16, 5, 16, 12),
    "winograd4_tail21": (16, 21, 3, 1, 9, 4),
}
LOOP_SHAPES = ("winograd4_tail21",)
DEPTHWISE_SHAPES = ("3x3_depthwise_tail21", "5x5_depthwise")


def _model(form: str, shape: str) -> tuple[ir.IRModule, list[np.ndarray]]:
    channels, out_channels, kernel, groups, size = SHAPES[shape][:5]
    rng = np.random.default_rng(5)
    x, r = ir.var("x", (1, size, size, channels)), ir.var("r", (1, size, size, out_channels))
    weight_shape = (kernel, kernel, channels // groups, out_channels)
    weight = ir.const(rng.standard_normal(weight_shape).astype(np.float32))
    bias = ir.const((rng.standard_normal(out_channels) * 3).astype(np.float32))
    conv = op.nn.conv2d(x, weight, padding=(kernel // 2,) * 4, groups=groups, data_layout="NHWC",
                        kernel_layout="HWIO")
    build, _ = FORMS[form]
    body = build(conv, bias, r) if "bias" in form else build(conv, None, r)
    params = [x, r] if "residual" in form else [x]
    inputs = [rng.standard_normal(p.type_annotation.shape).astype(np.float32) for p in params]
    inputs[0][0, 1, 1, :] = np.nan  # NaN sums: kept by relu, clip and hard-swish alike
    inputs[0][0, 2, 2, 0] = 1e6  # sums far past relu6's and hard-swish's bounds
    return ir.IRModule.from_expr(ir.Function(params, body)), inputs


def _config(cache_dir: str, fuse: bool, shape: str) -> dict:
    tile = SHAPES[shape][5:]
    kernel = {CONV_KERNEL_CONFIG: "winograd", TILE_CONFIG: tile[0]} if tile else {}
    return {"codegen.cache_dir": cache_dir, FUSE_CONFIG: fuse, CONV_KERNEL_CONFIG: "microkernel", **kernel}


def _conv_calls(mod: ir.IRModule, cache_dir: str, shape: str,
                fuse: bool = True) -> tuple[tir.PrimFunc, list[tir.Intrinsic]]:
    names = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("CodegenC")]
    with PassContext(opt_level=3, config=_config(cache_dir, fuse, shape)):
        lowered = Sequential([get_pass(name) for name in names])(mod)
    (conv,) = [f for f in lowered.functions.values()
               if isinstance(f, tir.PrimFunc) and "nn.conv2d" in f.attrs["op_names"]]
    calls = [n.value for n in _nodes(conv.body)
             if isinstance(n, tir.Evaluate) and (is_conv(n.value) or is_winograd(n.value))]
    assert all(is_winograd(call) == (len(SHAPES[shape]) > 5) for call in calls)
    return conv, calls


def _stores(func: tir.PrimFunc) -> list[tir.BufferStore]:
    return [n for n in _nodes(func.body) if isinstance(n, tir.For) and isinstance(n.body, tir.BufferStore)]


# every form on every shape of the microkernels; a form that keeps its loop on one (the same
# loop on any); a Winograd convolution's loop
CASES = [*((form, shape) for form, (_, fused) in FORMS.items() for shape in SHAPES
           if shape not in LOOP_SHAPES and (fused is not None or shape == "3x3_tail21")),
         ("bias_residual_relu", "winograd4_tail21")]


@pytest.mark.parametrize("form, shape", CASES, ids=[f"{form}-{shape}" for form, shape in CASES])
def test_a_fused_epilogue_gives_the_loops_bits(cache_dir, form, shape):
    mod, inputs = _model(form, shape)
    conv, calls = _conv_calls(mod, cache_dir, shape)
    epilogues = [ConvEpilogue.of(call) for call in calls]
    activation = None if shape in LOOP_SHAPES else FORMS[form][1]
    if shape in DEPTHWISE_SHAPES and form == "bias":
        activation = None  # a depthwise convolution's bias alone stays a loop (conv_microkernel)
    if activation is None:  # not fused: the loop stays
        assert epilogues and all(e is None for e in epilogues)
        assert _stores(conv)
    else:
        assert epilogues and all(e is not None and e.activation == activation for e in epilogues), epilogues
        assert all((e.bias is not None) == ("bias" in form) for e in epilogues)
        assert all((e.residual is not None) == ("residual" in form) for e in epilogues)
        assert all(e.residual_first == form.startswith("residual_then") for e in epilogues)
        assert not _stores(conv)  # no loop rewrites the outputs after the call
    libs = {}
    for fuse in (False, True):
        with PassContext(opt_level=3, config=_config(cache_dir, fuse, shape)):
            libs[fuse] = passinfra.build(mod)
    native = libs[True].conv_isa()
    # on every level the CPU has (the portable sums differ from the vector ones: no fused
    # multiply-add) and thread count, the loop's bits, NaNs' included
    for level in CONV_ISA_LEVELS[:CONV_ISA_LEVELS.index(native) + 1]:
        for threads in (1, 2):
            outputs = []
            for lib in libs.values():
                assert lib.conv_isa(level) == level
                lib.set_num_threads(threads)
                outputs.append(lib(*inputs))
            assert np.isnan(outputs[0]).any() and not np.isnan(outputs[0]).all()
            np.testing.assert_array_equal(outputs[1].view(np.uint32), outputs[0].view(np.uint32),
                                          err_msg=f"{level}, {threads} threads")


INTERPRETED = [("bias_hard_swish", "3x3_tail21"), ("bias_residual_relu", "3x3_tail21"),
               ("residual_then_bias_relu", "3x3_tail21"), ("bias_relu6", "3x3_depthwise_tail21")]


@pytest.mark.parametrize("form, shape", INTERPRETED, ids=[f"{form}-{shape}" for form, shape in INTERPRETED])
def test_the_tir_interpreter_runs_the_fused_call_as_the_loop(cache_dir, form, shape):
    mod, inputs = _model(form, shape)
    weight, bias = (np.asarray(node.data) for node in _constants(mod))
    # the kernel's parameters by their sizes, in any order (a weight in panels, or as it is)
    by_size = {a.size: a for a in (*inputs, weight, to_panels(weight, PANEL_WIDTH), bias)}
    results = []
    for fuse in (True, False):
        conv, calls = _conv_calls(mod, cache_dir, shape, fuse)
        assert all((ConvEpilogue.of(call) is not None) == fuse for call in calls)
        params = conv.params[:conv.attrs["num_inputs"]]
        args = [by_size[int(np.prod([int(d) for d in p.shape]))] for p in params]
        results.append(run_prim_func(conv, *args))
    assert np.isnan(results[0]).any()
    np.testing.assert_array_equal(results[0], results[1])


def _constants(mod: ir.IRModule) -> list[ir.Constant]:
    """The weight, then the bias."""
    found = [node for node in iter_post_order(mod["main"]) if isinstance(node, Constant)]
    return sorted(found, key=lambda node: -len(node.data.shape))


def test_the_config_is_a_registered_bool():
    with pytest.raises(PassConfigTypeError, match="conv_fuse_epilogue"):
        PassContext(config={FUSE_CONFIG: "yes"})
