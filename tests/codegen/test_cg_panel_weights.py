"""Weights stored in panels of output channels (passinfra.ir.op.weight_panels, the
PanelWeights pass, the microkernels' ``panel`` argument): the layout and its op, which
weights the pass converts, and what a library computes with them: the same bits as with
the weights in place, for any thread count, and the graph interpreter's values.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import passinfra
from passinfra import ir, tir
from passinfra.build import COMPILE_PIPELINE
from passinfra.codegen.compute.conv_microkernel import PANEL_WIDTH
from passinfra.codegen.compute.conv_plan import CONV_KERNEL_CONFIG
from passinfra.codegen.compute.conv_winograd import DEFAULT_TILE
from passinfra.codegen.lower import lower_primitive_function
from passinfra.codegen.passes.panel_weights import PANELS_CONFIG, panel_weights
from passinfra.errors import IRTypeError
from passinfra.ir import op
from passinfra.ir.expr import Call, Constant
from passinfra.ir.functor import iter_post_order
from passinfra.ir.op import weight_panels, winograd_weights
from passinfra.ir.type_infer import infer_type
from passinfra.runtime.interpreter import evaluate
from passinfra.runtime.module import CONV_ISA_LEVELS
from passinfra.tir.evaluator import run_prim_func
from passinfra.tir.intrinsics import conv_sizes, is_conv
from passinfra.transform import PassContext, Sequential, get_pass
from tests.codegen.test_cg_conv_kernels import _nodes
from tests.numerics import assert_sums_close

# the graph passes up to (and including) PanelWeights
UP_TO_PANELS = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("PanelWeights") + 1]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("codegen_cache_panels"))


def rng_array(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------- the layout and its op


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.integers(1, 4), min_size=1, max_size=3), channels=st.integers(1, 100),
       width=st.sampled_from([8, 16, 32]))
def test_panels_hold_the_weight_and_zeros_past_its_channels(rows, channels, width):
    weight = np.arange(np.prod(rows) * channels, dtype=np.float32).reshape(*rows, channels) + 1
    panels = weight_panels.to_panels(weight, width)
    blocks = -(-channels // width)
    assert panels.shape == (blocks, int(np.prod(rows)), width) and panels.flags.c_contiguous
    np.testing.assert_array_equal(weight_panels.from_panels(panels, weight.shape), weight)
    # channel o of row r is panels[o // width, r, o % width]; the padding is zeros
    flat = weight.reshape(-1, channels)
    assert panels[(channels - 1) // width, -1, (channels - 1) % width] == flat[-1, -1]
    assert (panels.transpose(1, 0, 2).reshape(flat.shape[0], -1)[:, channels:] == 0).all()


def test_the_unpack_op_type_checks_and_compiles_to_its_meaning(cache_dir):
    panels = ir.var("p", (3, 45, 32))
    func = ir.Function([panels], weight_panels.unpack(panels, (3, 3, 5, 70)))
    mod = ir.IRModule({"main": func})
    values = rng_array((3, 45, 32))
    expected = weight_panels.from_panels(values, (3, 3, 5, 70))
    np.testing.assert_array_equal(evaluate(mod, values), expected)
    with PassContext(config={"codegen.cache_dir": cache_dir}):
        lib = passinfra.build(mod)
    np.testing.assert_array_equal(lib(values), expected)  # the compute rule: an index map
    for shape in [(3, 3, 5, 100), (3, 3, 6, 70)]:  # 4 panels; 54 rows
        bad = ir.IRModule({"main": ir.Function([panels], weight_panels.unpack(panels, shape))})
        with pytest.raises(IRTypeError, match=r"do not hold a weight .*45 rows, 3 panels of 32"):
            infer_type(bad)


# --------------------------------------------------------------------------- the pass


def conv_module(out_channels: int = 70, kernel: int = 3,
                reuse_weight: bool = False) -> tuple[ir.IRModule, Constant]:
    x = ir.var("x", (1, 9, 9, 48))
    weight = ir.const(rng_array((kernel, kernel, 48, out_channels), 1))
    bias = ir.const(rng_array((out_channels,), 2))
    y = op.nn.relu(op.add(op.nn.conv2d(x, weight, padding=(kernel // 2,) * 2, data_layout="NHWC",
                                       kernel_layout="HWIO"), bias))
    if reuse_weight:  # the weight is also read as data: it must stay as it is
        z = ir.var("z", tuple(weight.shape))
        return ir.IRModule({"main": ir.Function([x, z], ir.Tuple([y, op.multiply(z, weight)]))}), weight
    return ir.IRModule({"main": ir.Function([x], y)}), weight


def conv_magnitude(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Per output of relu(conv(x, weight) + bias) (3x3, NHWC, HWIO, padding 1): the sum of
    its terms' absolute values, which bounds how summation order moves it (tests/numerics.py)."""
    data = ir.var("x", x.shape)
    conv = op.nn.conv2d(data, ir.const(np.abs(weight)), padding=(1, 1), data_layout="NHWC",
                        kernel_layout="HWIO")
    summed = op.add(conv, ir.const(np.abs(bias)))
    return evaluate(ir.IRModule({"main": ir.Function([data], summed)}), np.abs(x))


def graph_passes(mod: ir.IRModule, **config: object) -> ir.IRModule:
    with PassContext(opt_level=3, config=dict(config)):
        return Sequential([get_pass(name) for name in UP_TO_PANELS], opt_level=0)(mod)


def main_constants(mod: ir.IRModule) -> list[Constant]:
    return [n for n in iter_post_order(mod["main"].body) if isinstance(n, Constant)]


def test_a_microkernel_convolutions_weight_is_stored_in_panels_and_means_the_same():
    mod, weight = conv_module()
    panelled = graph_passes(mod, **{CONV_KERNEL_CONFIG: "microkernel"})  # (the AVX2 rule: Winograd)
    shapes = [c.shape for c in main_constants(panelled)]
    assert (3, 9 * 48, PANEL_WIDTH) in shapes  # 70 channels: three panels, zeros past 70
    assert tuple(weight.shape) not in shapes
    unpacks = [n for _, f in panelled.functions.items() for n in iter_post_order(f)
               if isinstance(n, Call) and getattr(n.op, "name", "") == weight_panels.OP_NAME]
    assert len(unpacks) == 1
    x = rng_array((1, 9, 9, 48), 5)
    # the panelled weight is summed in another order (its own GEMM shape in OpenBLAS)
    magnitude = conv_magnitude(x, rng_array((3, 3, 48, 70), 1), rng_array((70,), 2))
    assert_sums_close(evaluate(panelled, x), evaluate(mod, x), terms=9 * 48 + 1, magnitude=magnitude)
    off = graph_passes(mod, **{PANELS_CONFIG: False})
    assert tuple(weight.shape) in [c.shape for c in main_constants(off)]


def test_a_winograd_convolutions_weight_is_stored_as_its_transform_and_means_the_same():
    mod, weight = conv_module()
    transformed = graph_passes(mod, **{CONV_KERNEL_CONFIG: "winograd"})
    shapes = [c.shape for c in main_constants(transformed)]
    stored = winograd_weights.winograd_shape(48, 70, DEFAULT_TILE)
    assert stored == (3, (DEFAULT_TILE + 2) ** 2 * 48, PANEL_WIDTH) and stored in shapes
    assert tuple(weight.shape) not in shapes
    unpacks = [n for _, f in transformed.functions.items() for n in iter_post_order(f)
               if isinstance(n, Call) and getattr(n.op, "name", "") == winograd_weights.OP_NAME]
    assert len(unpacks) == 1
    x = rng_array((1, 9, 9, 48), 5)
    # the interpreter reads the weight back from its transform: each element within a few
    # roundings of the original, well inside the bound of the sums' order
    magnitude = conv_magnitude(x, rng_array((3, 3, 48, 70), 1), rng_array((70,), 2))
    assert_sums_close(evaluate(transformed, x), evaluate(mod, x), terms=9 * 48 + 1, magnitude=magnitude)


def test_weights_read_elsewhere_or_by_other_kernels_stay_in_place():
    shared, weight = conv_module(reuse_weight=True)
    assert tuple(weight.shape) in [c.shape for c in main_constants(graph_passes(shared))]
    # a grouped convolution on per-group GEMMs reads HWIO
    grouped = grouped_module(4, 16, 16)
    shapes = [c.shape for c in main_constants(graph_passes(grouped, **{CONV_KERNEL_CONFIG: "group_gemm"}))]
    assert (3, 3, 16, 64) in shapes
    # with the microkernels off, no weight is panelled
    direct, weight = conv_module()
    off = graph_passes(direct, **{CONV_KERNEL_CONFIG: "direct"})
    assert tuple(weight.shape) in [c.shape for c in main_constants(off)]


def test_the_pass_leaves_a_module_without_such_weights_unchanged():
    x = ir.var("x", (4, 8))
    mod = ir.IRModule({"main": ir.Function([x], op.nn.relu(x))})
    fused = graph_passes(mod, **{PANELS_CONFIG: False})
    assert panel_weights(fused, use_blas=True) is fused


# --------------------------------------------------------------------------- the kernels


def test_the_lowering_hands_the_panels_to_the_microkernels_and_the_tir_meaning_agrees():
    shapes = ((1, 9, 9, 48), (3, 3, 48, 70), (70,))
    x, w, b = (ir.var(name, shape) for name, shape in zip("xwb", shapes))
    panels = ir.var("p", (3, 9 * 48, PANEL_WIDTH))
    conv = op.nn.conv2d(x, weight_panels.unpack(panels, shapes[1]), padding=(1, 1), data_layout="NHWC",
                        kernel_layout="HWIO")
    func = ir.Function([x, panels, b], op.nn.relu(op.add(conv, b)))
    arrays = [rng_array(shape, k) for k, shape in enumerate(shapes)]
    packed = [arrays[0], weight_panels.to_panels(arrays[1], PANEL_WIDTH), arrays[2]]
    expected = evaluate(ir.IRModule({"main": func}), *packed)
    with PassContext(config={CONV_KERNEL_CONFIG: "microkernel"}):  # (the AVX2 rule: Winograd)
        lowered = lower_primitive_function(func, "kernel")
    calls = [n.value for n in _nodes(lowered.body) if isinstance(n, tir.Evaluate) and is_conv(n.value)]
    assert calls and all(conv_sizes(c)[-1].value == PANEL_WIDTH for c in calls)  # the panel argument
    assert all(c.args[1].buffer.name == lowered.params[1].name for c in calls)  # read in place
    # the TIR evaluator and the graph interpreter each sum in their own order (OpenBLAS
    # blocks them by its CPU's kernel): equal within what any order allows
    assert_sums_close(run_prim_func(lowered, *packed), expected, terms=9 * 48 + 1,
                      magnitude=conv_magnitude(*arrays))


def conv_and_matmul_module() -> ir.IRModule:
    """A convolution whose output channels end mid-panel (70) with a large weight (one
    call per image: the runtime splits it), then a matmul on the microkernels."""
    x = ir.var("x", (2, 8, 8, 256))
    w1 = ir.const(rng_array((3, 3, 256, 70), 1) * 0.05)
    w2 = ir.const(rng_array((70, 40), 2) * 0.1)
    y = op.nn.relu(op.nn.conv2d(x, w1, padding=(1, 1), data_layout="NHWC", kernel_layout="HWIO"))
    return ir.IRModule({"main": ir.Function([x], op.matmul(op.reshape(y, (128, 70)), w2))})


def test_libraries_with_panels_give_the_bits_of_weights_in_place_for_any_thread_count(cache_dir):
    mod = conv_and_matmul_module()
    forced = {CONV_KERNEL_CONFIG: "microkernel"}  # (the AVX2 rule: Winograd)
    shapes = [c.shape for c in main_constants(graph_passes(mod, **forced))]
    assert (3, 9 * 256, PANEL_WIDTH) in shapes and (2, 70, PANEL_WIDTH) in shapes  # both weights
    x = rng_array((2, 8, 8, 256), 4)
    with PassContext(config={"codegen.cache_dir": cache_dir, **forced}):
        lib = passinfra.build(mod)
    with PassContext(config={"codegen.cache_dir": cache_dir, PANELS_CONFIG: False, **forced}):
        in_place = passinfra.build(mod)
    assert lib.metadata["weights_bytes"] > in_place.metadata["weights_bytes"]  # 70 -> 96 channels
    want = in_place(x)
    for threads in (1, 2, 3):
        lib.set_num_threads(threads)
        np.testing.assert_array_equal(lib(x), want)
    np.testing.assert_allclose(want, evaluate(mod, x), rtol=1e-4, atol=1e-4)


def grouped_module(groups: int, per_group: int, outputs: int, size: int = 9) -> ir.IRModule:
    x = ir.var("x", (1, size, size, groups * per_group))
    w = ir.const(rng_array((3, 3, per_group, groups * outputs), 3) * 0.2)
    return ir.IRModule({"main": ir.Function([x], op.nn.relu(op.nn.conv2d(
        x, w, padding=(1, 1), strides=(2, 2) if size > 9 else (1, 1), groups=groups, data_layout="NHWC",
        kernel_layout="HWIO")))})


@pytest.mark.parametrize(("groups", "per_group", "outputs", "width"), [
    (4, 16, 16, 16),  # RegNet's groups: a group is one panel
    (3, 16, 24, 24),  # a group of 24 outputs: one panel of 24
    (2, 16, 64, PANEL_WIDTH),  # a group of whole panels
    (2, 16, 40, 0),  # neither: HWIO as it is
], ids=["16", "24", "64", "40"])
def test_a_grouped_convolution_reads_its_groups_in_panels_with_the_bits_of_hwio(
        cache_dir, groups, per_group, outputs, width):
    """On the microkernels a grouped convolution's weight is stored a group per panel (or
    in whole panels of 32): one contiguous run per group, the same products in the same
    order as HWIO read in place, for any thread count."""
    mod = grouped_module(groups, per_group, outputs, size=13)
    forced = {CONV_KERNEL_CONFIG: "microkernel"}
    shapes = [c.shape for c in main_constants(graph_passes(mod, **forced))]
    rows = 9 * per_group
    expected = (groups * outputs // width, rows, width) if width else (3, 3, per_group, groups * outputs)
    assert expected in shapes
    x = rng_array((1, 13, 13, groups * per_group), 5)
    with PassContext(config={"codegen.cache_dir": cache_dir, **forced}):
        lib = passinfra.build(mod)
    with PassContext(config={"codegen.cache_dir": cache_dir, PANELS_CONFIG: False, **forced}):
        in_place = passinfra.build(mod)
    np.testing.assert_allclose(in_place(x), evaluate(mod, x), rtol=1e-4, atol=1e-4)
    for level in CONV_ISA_LEVELS:  # every instruction set this CPU has (the portable tiles too)
        assert lib.conv_isa(level) == in_place.conv_isa(level)
        want = in_place(x)
        for threads in (1, 2, 3):
            lib.set_num_threads(threads)
            np.testing.assert_array_equal(lib(x), want)


def test_weights_converted_on_threads_give_the_module_converted_in_order(monkeypatch):
    """A large model's weights convert on threads (weight_parameters.convert_all): the
    module, its text and every weight's bytes are those of converting one at a time."""
    import threading

    from passinfra.codegen.passes import panel_weights as pass_module
    from passinfra.transform.builtin import weight_parameters

    x = ir.var("x", (1, 9, 9, 48))
    y = x
    for seed in range(4):  # four layers, four weights of their own
        weight = ir.const(rng_array((3, 3, 48, 48), 10 + seed))
        y = op.nn.relu(op.nn.conv2d(y, weight, padding=(1, 1), data_layout="NHWC", kernel_layout="HWIO"))
    mod = ir.IRModule({"main": ir.Function([x], y)})
    forced = {CONV_KERNEL_CONFIG: "microkernel"}  # (the AVX2 rule: Winograd)
    in_order = graph_passes(mod, **forced)
    threads: list[str] = []
    convert = pass_module.to_panels
    monkeypatch.setattr(pass_module, "to_panels",
                        lambda *a: threads.append(threading.current_thread().name) or convert(*a))
    monkeypatch.setattr(weight_parameters, "_PARALLEL_CONVERT_BYTES", 0)
    monkeypatch.setattr(weight_parameters, "available_cpus", lambda: 4)
    on_threads = graph_passes(mod, **forced)
    assert len(threads) == 4 and all(name.startswith("raypass-weights") for name in threads)
    assert on_threads.astext() == in_order.astext()
    assert [c.data.tobytes() for c in main_constants(on_threads)] == \
        [c.data.tobytes() for c in main_constants(in_order)]
