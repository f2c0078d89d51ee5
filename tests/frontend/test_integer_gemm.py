"""The integer GEMM (issue 33): ONNX MatMulInteger (and so dynamically quantized models)
runs as one call of the C runtime's u8 x s8 kernel (``passinfra/codegen/c/qgemm.c``), its
constant weights stored in the kernel's panels. Exact int32 results, the same bits on
every instruction set the runtime has here and for any thread count."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import passinfra
from passinfra.frontend import from_onnx
from passinfra.ir.op import qgemm_panels
from passinfra.transform import PassContext
from tests.isa_levels import assert_same_on_every_isa, qgemm_body_calls

ort = pytest.importorskip("onnxruntime")

_ONNX_TYPES = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def _ints(rng: np.random.Generator, dtype: str, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def matmul_integer(a_shape, n, a_dtype, b_dtype, a_zero="one", b_zero="one", weight=True, seed=0):
    """A MatMulInteger model (the weight an initializer unless ``weight`` is False) and its
    left operand's values. Zero points: "one", "rows" (left) / "columns" (right), "none"."""
    rng = np.random.default_rng(seed)
    k, rows = a_shape[-1], a_shape[-2]
    tensors = {"za": None if a_zero == "none" else _ints(rng, a_dtype, (rows,) if a_zero == "rows" else ()),
               "zb": None if b_zero == "none" else _ints(rng, b_dtype, (n,) if b_zero == "columns" else ())}
    inputs = [helper.make_tensor_value_info("A", _ONNX_TYPES[a_dtype], a_shape)]
    b = _ints(rng, b_dtype, (k, n))
    if weight:
        tensors["B"] = b
    else:
        inputs.append(helper.make_tensor_value_info("B", _ONNX_TYPES[b_dtype], (k, n)))
    names = ["A", "B", "za" if tensors["za"] is not None else "", "zb" if tensors["zb"] is not None else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("MatMulInteger", names, ["Y"])
    output = helper.make_tensor_value_info("Y", TensorProto.INT32, None)
    inits = [numpy_helper.from_array(v, name) for name, v in tensors.items() if v is not None]
    graph = helper.make_graph([node], "mi", inputs, [output], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"A": _ints(rng, a_dtype, a_shape)}
    if not weight:
        feeds["B"] = b
    return model, feeds


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("qgemm-cache"))


def _build(model, cache_dir: str):
    mod = from_onnx(model)
    with PassContext(opt_level=3, config={"codegen.cache_dir": cache_dir}):
        return mod, passinfra.build(mod)


def _exact(model, feeds: dict) -> np.ndarray:
    """The model's product in int64, wrapped to int32."""
    inits = {i.name: numpy_helper.to_array(i).astype(np.int64) for i in model.graph.initializer}
    a, b = feeds["A"].astype(np.int64), inits.get("B", feeds.get("B")).astype(np.int64)
    za, zb = inits.get("za", np.int64(0)), inits.get("zb", np.int64(0))
    return ((a - (za[:, None] if za.ndim else za)) @ (b - zb)).astype(np.int32)


def _weight(model) -> np.ndarray:
    return next(numpy_helper.to_array(i) for i in model.graph.initializer if i.name == "B")


def _pairs_fit(b: np.ndarray) -> bool:
    """Whether every pair of a column of the int8 ``b`` (rows 2j, 2j + 1) has |b0 + b1| <=
    128: then u8 x s8 pair sums never saturate 16 bits (c/qgemm.c, body 7)."""
    padded = np.concatenate([b.astype(np.int32), np.zeros((len(b) % 2, b.shape[1]), np.int32)])
    return bool(np.abs(padded[0::2] + padded[1::2]).max(initial=0) <= 128)


def _same_everywhere(lib, feeds: dict, expected: np.ndarray) -> None:
    assert_same_on_every_isa(lib, list(feeds.values()), expected)


@pytest.mark.parametrize(("a_shape", "n", "a_dtype", "b_dtype", "a_zero", "b_zero"), [
    ((1, 96), 40, "uint8", "int8", "one", "one"),  # a decode step (dynamic quantization's types)
    ((5, 101), 33, "uint8", "int8", "rows", "columns"),  # k not a multiple of 4, n of 32
    ((2, 3, 64), 70, "int8", "int8", "one", "columns"),  # rank 3: the rows are 2 x 3
    ((7, 13), 64, "uint8", "uint8", "none", "columns"),
    ((6, 300), 65, "int8", "uint8", "one", "none"),
    ((9, 1), 3, "uint8", "int8", "one", "one"),  # k = 1
    ((33, 16), 24, "int8", "int8", "one", "none"),  # rows of A' 16 k apart (not AMX's 64), flipped
    # 16 rows or more: AMX where the CPU has it, in steps of 32 rows (the last 8 on VNNI)
    ((40, 130), 70, "uint8", "int8", "rows", "columns"),
    ((2, 16, 64), 33, "int8", "uint8", "one", "none"),
])
def test_matmul_integer_is_onnxruntime_s_exactly(a_shape, n, a_dtype, b_dtype, a_zero, b_zero, cache_dir):
    model, feeds = matmul_integer(a_shape, n, a_dtype, b_dtype, a_zero, b_zero)
    expected = _exact(model, feeds)
    # onnxruntime 1.32 takes one zero point for the left operand only, and its u8 x s8 kernel
    # is exact only where no pair of products saturates 16 bits (everywhere with VNNI; on
    # AVX2 without it VPMADDUBSW saturates: a full-range int8 weight)
    if a_zero != "rows" and (b_dtype == "uint8" or _pairs_fit(_weight(model))):
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        assert np.array_equal(session.run(None, feeds)[0], expected)
    mod, lib = _build(model, cache_dir)
    assert np.array_equal(np.asarray(passinfra.evaluate(mod, *feeds.values())), expected)
    _same_everywhere(lib, feeds, expected)


def test_the_weight_is_stored_once_as_bytes_in_the_kernels_panels(cache_dir, tmp_path):
    k, n = 320, 96
    model, feeds = matmul_integer((4, k), n, "uint8", "int8")
    _, lib = _build(model, cache_dir)
    lib.export_library(str(tmp_path / "lib.so"))
    weights = (tmp_path / "lib.so.weights.bin").stat().st_size
    # the bytes, 96 int32 column sums and a panel's 4 bytes of flags a column
    panels = int(np.prod(qgemm_panels.panels_shape(k, n)))
    assert panels == k * n + 8 * n
    assert panels <= weights <= panels + 4096  # alignment, nothing else: not an int32 or float copy


@pytest.mark.parametrize("n", [45, 12])  # 12: one narrow panel
def test_a_right_operand_computed_at_run_time_is_packed_by_the_kernel(n, cache_dir):
    model, feeds = matmul_integer((20, 37), n, "uint8", "uint8", "rows", "one", weight=False)
    _, lib = _build(model, cache_dir)
    _same_everywhere(lib, feeds, _exact(model, feeds))


def test_products_that_saturate_sixteen_bits_are_exact(cache_dir):
    """255 * 127 + 255 * 127 overflows int16: VPMADDUBSW (onnxruntime's AVX2 u8 x s8
    kernel) saturates such a pair; every body here is exact."""
    k, n = 64, 32
    model, _ = matmul_integer((17, k), n, "uint8", "int8", "none", "none")
    b = np.where(np.arange(n) % 2, 127, -128).astype(np.int8)[None, :].repeat(k, axis=0)
    for init in model.graph.initializer:
        if init.name == "B":
            init.CopyFrom(numpy_helper.from_array(b, "B"))
    a = np.full((17, k), 255, np.uint8)
    expected = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    assert expected.max() == 255 * 127 * k and expected.min() == -255 * 128 * k
    _, lib = _build(model, cache_dir)
    _same_everywhere(lib, {"A": a}, expected)


# 601: three blocks of k (256 each); 128: a whole number of groups of four, so the rows are
# read in place (300: two blocks of rows); one row: a decode step's
@pytest.mark.parametrize(("rows", "k"), [(17, 601), (5, 130), (300, 128), (1, 64)])
@pytest.mark.parametrize("fits", [True, False])
def test_a_weight_whose_pairs_fit_sixteen_bits_runs_on_vpmaddubsw_exactly(rows, k, fits, cache_dir):
    """AVX2 without VNNI multiplies by VPMADDUBSW where every pair of a column (k = 2j,
    2j + 1) has |b0 + b1| <= 128 (a 7-bit weight, onnxruntime's reduce_range): then no pair
    of products saturates 16 bits. Pairs at the bound (-64, -64) times 255; one pair past it
    (-64, -65), the weight's last, keeps it on the body that widens to 16 bits (the panels'
    flag, qgemm_panels.pairs_fit at compile time). Exact either way, on
    every level; at the AVX2 level the counters show the body each took, where that level
    runs the AVX2 bodies (not on a CPU with AVX-VNNI, whose 256-bit VNNI body it takes)."""
    n = 40
    model, _ = matmul_integer((rows, k), n, "uint8", "int8", "one", "none", seed=rows)
    rng = np.random.default_rng(rows)
    b = rng.integers(-64, 64, (k, n)).astype(np.int8)
    b[:2, :] = -64  # |b0 + b1| = 128: 255 * 128 = 32640 fits
    if not fits:  # the last pair of the last column
        last = (k - 2) // 2 * 2
        b[last, n - 1], b[last + 1, n - 1] = -64, -65
    for init in model.graph.initializer:
        if init.name == "B":
            init.CopyFrom(numpy_helper.from_array(b, "B"))
    a = np.where(rng.random((rows, k)) < 0.5, 255, rng.integers(0, 256, (rows, k))).astype(np.uint8)
    expected = _exact(model, {"A": a})
    _, lib = _build(model, cache_dir)
    _same_everywhere(lib, {"A": a}, expected)
    levels = lib.conv_isa()
    lib.conv_isa("avx2")
    try:
        before = qgemm_body_calls(lib)
        assert np.array_equal(lib(a), expected)
        took = [after - first for after, first in zip(qgemm_body_calls(lib), before, strict=True)]
    finally:
        lib.conv_isa(levels)
    assert sum(took) == 1, took
    if took[5] == 0:  # the AVX2 bodies: VPMADDUBSW (7) where the pairs fit, else widening (1)
        assert took[7 if fits else 1] == 1, took


# 784 rows (28 x 28 pixels): blocks of 256 rows on one thread, as even as whole steps of 32
# allow on more (c/qgemm.c, rp_qgemm_block_rows); 40 columns: two panels, row mode; 300:
# ten, panel mode; a 7-bit weight (VPMADDUBSW, A read in place) and a full-range one
@pytest.mark.parametrize(("n", "limit"), [(40, 63), (300, 127)])
def test_the_rows_split_over_any_thread_count_give_the_same_bits(n, limit, cache_dir):
    model, _ = matmul_integer((784, 72), n, "uint8", "int8", "one", "none", seed=n)
    rng = np.random.default_rng(n)
    b = rng.integers(-limit, limit + 1, (72, n)).astype(np.int8)
    for init in model.graph.initializer:
        if init.name == "B":
            init.CopyFrom(numpy_helper.from_array(b, "B"))
    a = rng.integers(0, 256, (784, 72)).astype(np.uint8)
    expected = _exact(model, {"A": a})
    _, lib = _build(model, cache_dir)
    original = lib.num_threads
    try:
        for threads in (1, 2, 3, 4, 7):
            lib.set_num_threads(threads)
            assert np.array_equal(lib(a), expected), threads
    finally:
        lib.set_num_threads(original)


@pytest.mark.parametrize(("k", "n", "dtype"), [(1, 1, "int8"), (6, 35, "uint8"), (64, 32, "int8"),
                                               (9, 70, "uint8"), (70, 16, "int8"), (5, 12, "uint8")])
def test_panels_round_trip(k, n, dtype):
    weight = _ints(np.random.default_rng(k * n), dtype, (k, n))
    panels = qgemm_panels.to_panels(weight)
    assert panels.shape == qgemm_panels.panels_shape(k, n) and panels.dtype == np.int8
    assert panels.shape[2] == (16 if n <= 16 else 32)  # at most 16 columns: narrow panels
    back = qgemm_panels.from_panels(panels, (k, n), dtype)
    assert back.dtype == weight.dtype and np.array_equal(back, weight)
    # column c's four k of group g side by side; a uint8 weight stored minus 128
    signed = weight.astype(np.int32) - (128 if dtype == "uint8" else 0)
    assert panels[0, 0, 0, 0] == signed[0, 0]
    if k > 3 and n > 2:
        assert panels[0, 0, 2, 3] == signed[3, 2]
    # the group before the last: each column's sum, int32 little-endian
    sums = np.ascontiguousarray(panels[:, -2]).view("<i4").reshape(-1)
    assert np.array_equal(sums[:n], signed.sum(axis=0)) and not sums[n:].any()
    # the last: the flag of every panel, whether each pair of stored bytes fits 16 bits
    flags = panels[:, -1].reshape(len(panels), -1)
    assert (flags[:, 0] == qgemm_panels.pairs_fit(weight)).all() and not flags[:, 1:].any()


@pytest.mark.parametrize("groups", [1, 2])
def test_the_panels_flag_says_whether_every_pair_of_the_weight_fits_sixteen_bits(groups):
    weight = np.random.default_rng(0).integers(-64, 64, (9, 40)).astype(np.int8)
    weight[:2] = -64  # |b0 + b1| = 128: the bound, which fits
    assert qgemm_panels.pairs_fit(weight)
    assert (qgemm_panels.to_panels(weight, groups)[:, -1, 0, 0] == 1).all()
    weight[8, 39] = -128  # k's last pair: -128 with the zero past k, which fits
    assert qgemm_panels.pairs_fit(weight)
    for row, column, pair in ((6, 39, [127, 2]), (2, 0, [-64, -65])):  # past the bound
        misfit = weight.copy()
        misfit[row:row + 2, column] = pair
        assert not qgemm_panels.pairs_fit(misfit)
        assert (qgemm_panels.to_panels(misfit, groups)[:, -1, 0, 0] == 0).all()
    unsigned = np.full((4, 3), 192, np.uint8)  # stored as 64: 64 + 64 fits
    assert qgemm_panels.pairs_fit(unsigned) and not qgemm_panels.pairs_fit(unsigned + 1)


def test_a_dynamically_quantized_model_with_symbolic_rows(cache_dir, tmp_path):
    """onnxruntime's quantize_dynamic on a small MLP whose rows are symbolic: one library
    for every row count, onnxruntime's outputs (float, so within float32 rounding). Weights
    of 7 bits (``reduce_range``, onnxruntime's remedy for its u8 x s8 kernel on AVX2 without
    VNNI, which saturates 16-bit pair sums of a full-range weight): its sums are then exact
    on every CPU, as ours are."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal((48, 40)) / 7).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((40, 24)) / 6).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "mlp", [value("x", TensorProto.FLOAT, ["rows", 48])],
                              [value("y", TensorProto.FLOAT, ["rows", 24])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "f.onnx")
    quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", weight_type=QuantType.QInt8, reduce_range=True)
    model = onnx.load(tmp_path / "q.onnx")
    assert "MatMulInteger" in {node.op_type for node in model.graph.node}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _, lib = _build(model, cache_dir)
    for rows in (1, 6):
        x = rng.standard_normal((rows, 48)).astype(np.float32)
        expected = session.run(None, {"x": x})[0]
        np.testing.assert_allclose(lib(x), expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())


@pytest.mark.parametrize("low", [-64, -128])
@pytest.mark.parametrize(("rows", "n"), [(13, 96), (40, 640)])
def test_a_weight_of_many_bytes_is_streamed_with_the_same_bits(low, rows, n, cache_dir):
    """A weight of 128 KiB or more (RP_QGEMM_STREAM_BYTES: here 2048 x 96) runs on the
    four-row tiles that ask for its panels' bytes ahead (7 bits: VPMADDUBSW's on AVX2; 8:
    the widening body's): the same products, so the exact sums, at every level and thread
    count. Of 20 panels (640 columns; 40 rows: AMX where the CPU has it), a thread claims
    them in runs of two."""
    k = 2048
    model, _ = matmul_integer((rows, k), n, "uint8", "int8", "one", "none", seed=5)
    b = np.random.default_rng(5).integers(low, -low, (k, n)).astype(np.int8)
    for init in model.graph.initializer:
        if init.name == "B":
            init.CopyFrom(numpy_helper.from_array(b, "B"))
    a = np.random.default_rng(6).integers(0, 256, (rows, k)).astype(np.uint8)
    _, lib = _build(model, cache_dir)
    _same_everywhere(lib, {"A": a}, _exact(model, {"A": a}))
