"""ToMixedPrecision (config ``codegen.weight_dtype``): large weights stored in 16 bits, the
kernels computing in float32.

Before/Expected rewrites of fused modules; what stays float32 and why; FoldConstant does
not undo it; the compiled library against NumPy on the *rounded* weights; the weights
file halves; no float32 copy of a weight at run time (the C, the workspace); the config
key's errors; the command line; Ray workers print the same IR.

Tolerances. With the weights rounded the same way, the library and NumPy compute the
same real numbers and differ only by float32 rounding in the sums, whose order BLAS and
the loop nests choose. So each check bounds ``|out - ref|`` by the classic dot-product
error bound, ``depth * 2**-24 * (|x| @ |w|)`` (with ``ref`` and the magnitudes in
float64), which holds for every summation order and CPU: a wrong rounding of one weight
(~2**-9 relative for bfloat16) would be far outside it.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import passinfra
import passinfra.codegen  # noqa: F401  (registers the codegen passes)
from passinfra import evaluate, ir
from passinfra.build import COMPILE_PIPELINE, compile_pipeline
from passinfra.codegen.artifacts import kernel_c_source
from passinfra.codegen.transform.widen_gemm_operands import MIN_PANEL, PANEL_ELEMENTS
from passinfra.errors import IRError
from passinfra.ir import op
from passinfra.runtime.module import WEIGHTS_SUFFIX
from passinfra.tir import PrimFunc
from passinfra.transform import (
    FoldConstant,
    FuseOps,
    InferType,
    PassArgumentError,
    PassConfigError,
    PassConfigTypeError,
    PassContext,
    Sequential,
    ToMixedPrecision,
    get_pass,
)
from passinfra.transform.builtin.to_mixed_precision import MIN_WEIGHT_ELEMENTS, to_mixed_precision
from passinfra.transform.pass_options import configured_pass, pass_options
from tests.cli.conftest import RAYPASS

HALF = ("bfloat16", "float16")
EPS32 = 2.0**-24


def rounded(weight: np.ndarray, dtype: str) -> np.ndarray:
    """``weight`` as the library stores it: rounded to ``dtype`` (nearest-even), as float32."""
    return weight.astype(dtype).astype(np.float32)


def weights(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def primitive(params: list[ir.Var], body: ir.Expr) -> ir.Function:
    return ir.Function(params, body).with_attr("Primitive", 1)


def fused(func: ir.Function) -> ir.IRModule:
    return Sequential([InferType(), FuseOps()])(ir.IRModule({"main": func}))


def assert_within_rounding(out: np.ndarray, ref: np.ndarray, magnitude: np.ndarray, depth: int) -> None:
    """``|out - ref| <= depth * 2**-24 * magnitude`` (+ one float32 ulp of the result, the
    store's rounding): float32 sums of ``depth`` products, in any order."""
    bound = 2 * depth * EPS32 * magnitude + np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    excess = np.abs(out.astype(np.float64) - ref) - bound
    assert excess.max() <= 0, f"outside float32 rounding by {excess.max():g} (bound {bound.max():g})"


@pytest.fixture(scope="module")
def codegen_ctx(tmp_path_factory: pytest.TempPathFactory):
    cache = str(tmp_path_factory.mktemp("kernels"))
    yield {"codegen.cache_dir": cache}


def build(mod: ir.IRModule, config: dict, weight_dtype: str, opt_level: int = 3, **extra):
    with PassContext(config={**config, "codegen.weight_dtype": weight_dtype, **extra}):
        return passinfra.build(mod, opt_level=opt_level)


# --------------------------------------------------------------------------- the rewrite


def dense_module(weight: np.ndarray, bias: np.ndarray) -> ir.IRModule:
    """main calls a fused dense + bias + relu with the weight and bias as constants (the
    form FuseOps gives)."""
    n, k = weight.shape
    x = ir.var("x", (4, k))
    p0, p1, p2 = ir.var("p0", (4, k)), ir.var("p1", (n, k)), ir.var("p2", (n,))
    fn = primitive([p0, p1, p2], op.nn.relu(op.add(op.nn.dense(p0, p1), p2)))
    gv = ir.GlobalVar("fused_nn_dense_add_nn_relu")
    main = ir.Function([x], ir.Call(gv, [x, ir.const(weight), ir.const(bias)]))
    return ir.IRModule({"main": main, gv: fn})


@pytest.mark.parametrize("dtype", HALF)
def test_dense_weight_becomes_a_16_bit_parameter_read_through_a_cast(dtype):
    weight, bias = weights((48, 64)), weights((48,), 1)
    before = dense_module(weight, bias)

    x = ir.var("x", (4, 64))
    p0, p1, p2 = ir.var("p0", (4, 64)), ir.var("p1", (48, 64), dtype), ir.var("p2", (48,))
    body = op.nn.relu(op.add(op.nn.dense(p0, op.cast(p1, "float32")), p2))
    gv = ir.GlobalVar("fused_nn_dense_add_nn_relu")
    main = ir.Function([x], ir.Call(gv, [x, ir.const(weight.astype(dtype)), ir.const(bias)]))
    expected = ir.IRModule({"main": main, gv: primitive([p0, p1, p2], body)})

    after = ToMixedPrecision(dtype)(before)
    ir.assert_structural_equal(after, expected)
    assert before["main"].body.args[1].dtype == "float32", "the input module is not changed"


def test_fused_transformer_like_module_converts_weights_and_embeddings_only():
    """From an unfused function: the matmul weights and the embedding table convert; the
    bias and the layer-norm parameters (epilogue operands, small) stay float32."""
    tokens = ir.var("tokens", (1, 8), "int64")
    table, w1, w2 = weights((128, 32)), weights((32, 64), 1), weights((64, 32), 2)
    bias, gamma, beta = weights((64,), 3), weights((32,), 4), weights((32,), 5)
    x = op.take(ir.const(table), tokens, axis=0)
    h = op.nn.layer_norm(x, ir.const(gamma), ir.const(beta))
    h = op.nn.gelu(op.add(op.matmul(h, ir.const(w1)), ir.const(bias)))
    mod = fused(ir.Function([tokens], op.add(x, op.matmul(h, ir.const(w2)))))
    after = ToMixedPrecision("bfloat16")(mod)
    passed = {}
    for gv, func in after.functions.items():
        if gv.name_hint == "main":
            continue
        types = [p.type_annotation for p in func.params]
        passed[gv.name_hint] = [t.dtype for t in types]
    assert passed["fused_take"] == ["bfloat16", "int64"]
    assert sorted(passed["fused_matmul_add_nn_gelu"]) == ["bfloat16", "float32", "float32"]
    assert passed["fused_nn_layer_norm"] == ["float32", "float32", "float32"]
    # the rounded weights are what the module computes with (interpreter vs NumPy)
    ids = np.arange(8, dtype=np.int64).reshape(1, 8) * 7 % 128
    emb = rounded(table, "bfloat16")[ids]
    mean, var = emb.mean(-1, keepdims=True), emb.var(-1, keepdims=True)
    norm = (emb - mean) / np.sqrt(var + 1e-5) * gamma + beta
    z = norm @ rounded(w1, "bfloat16") + bias
    gelu = 0.5 * z * (1 + np.vectorize(math.erf)(z / np.sqrt(2)))
    ref = emb + gelu @ rounded(w2, "bfloat16")
    np.testing.assert_allclose(evaluate(after, ids), ref, rtol=2e-5, atol=2e-5)


def test_what_stays_float32():
    small = weights((16, 32))  # 512 elements < MIN_WEIGHT_ELEMENTS
    assert small.size < MIN_WEIGHT_ELEMENTS
    mod = dense_module(small, weights((16,), 1))
    assert to_mixed_precision(mod, "bfloat16") is mod
    # min_elements is an option: with 256 the same weight converts
    assert ToMixedPrecision("bfloat16", min_elements=256)(mod)["main"].body.args[1].dtype == "bfloat16"

    # a large constant used as an elementwise operand (not a weight operand)
    x = ir.var("x", (64, 64))
    p0, p1 = ir.var("p0", (64, 64)), ir.var("p1", (64, 64))
    gv = ir.GlobalVar("fused_add")
    added = ir.IRModule({"main": ir.Function([x], ir.Call(gv, [x, ir.const(weights((64, 64)))])),
                         gv: primitive([p0, p1], op.add(p0, p1))})
    assert to_mixed_precision(added, "bfloat16") is added

    # a parameter read as a weight and as something else inside the kernel
    both = ir.IRModule({"main": ir.Function([x], ir.Call(gv, [x, ir.const(weights((64, 64)))])),
                        gv: primitive([p0, p1], op.add(op.nn.dense(p0, p1), p1))})
    assert to_mixed_precision(both, "bfloat16") is both

    # float16 cannot hold this weight (65504 is its largest value): it stays float32
    huge = weights((48, 64))
    huge[3, 5] = 1e5
    big = dense_module(huge, weights((48,), 1))
    assert to_mixed_precision(big, "float16") is big
    assert to_mixed_precision(big, "bfloat16")["main"].body.args[1].dtype == "bfloat16"

    # float32 is "off", and so is the default config
    assert to_mixed_precision(big, "float32") is big
    ir.assert_structural_equal(ToMixedPrecision()(big), big)


def test_a_constant_also_used_elsewhere_stays_float32_everywhere():
    """Converting it would store the weight twice (16-bit for the kernel, float32 for the
    other use), so it is left as it is."""
    weight = weights((64, 64))
    shared = ir.const(weight)
    x = ir.var("x", (4, 64))
    p0, p1 = ir.var("p0", (4, 64)), ir.var("p1", (64, 64))
    q0, q1 = ir.var("q0", (64, 64)), ir.var("q1", (64, 64))
    dense, add = ir.GlobalVar("fused_nn_dense"), ir.GlobalVar("fused_add")
    main = ir.Function([x], ir.Tuple([ir.Call(dense, [x, shared]), ir.Call(add, [shared, shared])]))
    mod = ir.IRModule({"main": main, dense: primitive([p0, p1], op.nn.dense(p0, p1)),
                       add: primitive([q0, q1], op.add(q0, q1))})
    assert to_mixed_precision(mod, "bfloat16") is mod


def test_a_shared_kernel_called_with_a_constant_and_with_a_runtime_weight_gets_a_converted_copy():
    weight = weights((48, 64))
    x, w = ir.var("x", (4, 64)), ir.var("w", (48, 64))
    p0, p1 = ir.var("p0", (4, 64)), ir.var("p1", (48, 64))
    gv = ir.GlobalVar("fused_nn_dense")
    fn = primitive([p0, p1], op.nn.dense(p0, p1))
    before = ir.IRModule({
        "main": ir.Function([x, w], ir.Tuple([ir.Call(gv, [x, ir.const(weight)]), ir.Call(gv, [x, w])])),
        gv: fn,
    })

    x2, w2 = ir.var("x", (4, 64)), ir.var("w", (48, 64))
    c0, c1 = ir.var("p0", (4, 64)), ir.var("p1", (48, 64), "bfloat16")
    copy = ir.GlobalVar("fused_nn_dense_bf16")
    expected = ir.IRModule({
        "main": ir.Function([x2, w2], ir.Tuple([ir.Call(copy, [x2, ir.const(weight.astype("bfloat16"))]),
                                                ir.Call(gv, [x2, w2])])),
        gv: fn,
        copy: primitive([c0, c1], op.nn.dense(c0, op.cast(c1, "float32"))),
    })
    after = ToMixedPrecision("bfloat16")(before)
    ir.assert_structural_equal(after, expected)
    assert [g.name_hint for g in after.functions] == ["main", "fused_nn_dense", "fused_nn_dense_bf16"]


def test_a_weight_passed_to_two_calls_is_rounded_once_and_shared():
    shared = ir.const(weights((48, 64)))
    x = ir.var("x", (4, 64))
    p0, p1 = ir.var("p0", (4, 64)), ir.var("p1", (48, 64))
    gv = ir.GlobalVar("fused_nn_dense")
    main = ir.Function([x], ir.Tuple([ir.Call(gv, [x, shared]), ir.Call(gv, [op.negative(x), shared])]))
    mod = ir.IRModule({"main": main, gv: primitive([p0, p1], op.nn.dense(p0, p1))})
    first, second = ToMixedPrecision("bfloat16")(mod)["main"].body.fields
    assert first.args[1] is second.args[1] and first.args[1].dtype == "bfloat16"


def test_fold_constant_does_not_fold_the_cast_back():
    """The cast applies to a parameter of the primitive function, and the caller calls a
    function: there is nothing for FoldConstant to evaluate."""
    mixed = ToMixedPrecision("bfloat16")(dense_module(weights((48, 64)), weights((48,), 1)))
    for interprocedural in (False, True):
        ir.assert_structural_equal(FoldConstant(interprocedural=interprocedural)(mixed), mixed)
    refolded = Sequential([get_pass(name) for name in ("InferType", "FoldConstant")])(mixed)
    assert refolded["main"].body.args[1].dtype == "bfloat16"


def test_the_pass_runs_right_after_fuse_ops_and_after_the_last_fold_constant():
    position = COMPILE_PIPELINE.index("ToMixedPrecision")
    assert COMPILE_PIPELINE[position - 1] == "FuseOps"
    assert position > max(i for i, name in enumerate(COMPILE_PIPELINE) if name == "FoldConstant")
    widen = COMPILE_PIPELINE.index("WidenGemmOperands")
    assert COMPILE_PIPELINE.index("Parallelize") < widen < COMPILE_PIPELINE.index("CodegenC")
    assert isinstance(get_pass("ToMixedPrecision"), ToMixedPrecision)
    assert get_pass("ToMixedPrecision").info.opt_level == 0
    # options as every pass declares them: data, rebuilt by name (reproducers)
    configured = configured_pass("ToMixedPrecision", {"weight_dtype": "float16", "min_elements": 64})
    assert configured == ToMixedPrecision("float16", 64)
    assert pass_options(configured) == {"weight_dtype": "float16", "min_elements": 64}


# --------------------------------------------------------------------------- the config key


def test_a_bad_weight_dtype_is_one_clear_error():
    with pytest.raises(PassConfigError) as caught:
        PassContext(config={"codegen.weight_dtype": "int8"})
    assert str(caught.value) == (
        "config 'codegen.weight_dtype' must be one of 'float32', 'bfloat16', 'float16'; got 'int8'"
    )
    with pytest.raises(PassConfigTypeError, match="expects a value of type str"):
        PassContext(config={"codegen.weight_dtype": 16})
    choices = "'float32', 'bfloat16', 'float16'"
    with pytest.raises(PassArgumentError, match=f"weight_dtype must be one of {choices}; got 'fp8'"):
        ToMixedPrecision("fp8")
    with pytest.raises(PassArgumentError, match="min_elements must be a positive int"):
        ToMixedPrecision("bfloat16", min_elements=0)


def test_the_config_key_drives_the_pass():
    mod = dense_module(weights((48, 64)), weights((48,), 1))
    with PassContext(config={"codegen.weight_dtype": "float16"}):
        after = ToMixedPrecision()(mod)
    assert after["main"].body.args[1].dtype == "float16"


# --------------------------------------------------------------------------- compiled


def panel_width(depth: int) -> int:
    """Rows or columns of the weight one widened panel holds, for a reduction of ``depth``."""
    return max(MIN_PANEL, PANEL_ELEMENTS // depth)


def contraction_cases(dtype: str):
    """(name, module, inputs, reference on rounded weights, magnitude, depth, opt_level).

    Sizes put each GEMM weight over several widened panels, the last one short."""
    rng = np.random.default_rng(7)
    cases = []

    n = 2 * panel_width(400) + 46  # dense: B transposed, panels of rows of the weight
    w = weights((n, 400), 1)
    b = weights((n,), 2)
    x = ir.var("x", (12, 400))
    xv = rng.standard_normal((12, 400)).astype(np.float32)
    body = op.nn.relu(op.nn.bias_add(op.nn.dense(x, ir.const(w)), ir.const(b)))
    mod = ir.IRModule.from_expr(ir.Function([x], body))
    wr = rounded(w, dtype).astype(np.float64)
    ref = np.maximum(xv.astype(np.float64) @ wr.T + b, 0)
    cases.append(("dense", mod, (xv,), ref, np.abs(xv) @ np.abs(wr).T + np.abs(b), 400, 3))

    # few rows and many columns: Parallelize splits the GEMM over column parts (the last
    # one short), and each part widens its own panels
    w = (weights((4001, 512), 8) * 0.1).astype(np.float32)
    x = ir.var("x", (8, 512))
    xv = rng.standard_normal((8, 512)).astype(np.float32)
    mod = ir.IRModule.from_expr(ir.Function([x], op.nn.dense(x, ir.const(w))))
    wr = rounded(w, dtype).astype(np.float64)
    cases.append(("dense_split", mod, (xv,), xv.astype(np.float64) @ wr.T, np.abs(xv) @ np.abs(wr).T, 512, 3))

    w = weights((300, 2 * panel_width(300) + 41), 3)  # matmul: B [K, N], panels of columns
    x = ir.var("x", (2, 5, 300))
    xv = rng.standard_normal((2, 5, 300)).astype(np.float32)
    mod = ir.IRModule.from_expr(ir.Function([x], op.matmul(x, ir.const(w))))
    wr = rounded(w, dtype).astype(np.float64)
    ref = xv.astype(np.float64) @ wr
    cases.append(("matmul", mod, (xv,), ref, np.abs(xv) @ np.abs(wr), 300, 3))

    # conv2d: NHWC/HWIO at opt_level 3 (B panels), NCHW/OIHW at opt_level 2 (the weight
    # is the GEMM's left operand: panels of output rows)
    w = (weights((panel_width(512) + 32, 512, 1, 1), 4) * 0.05).astype(np.float32)
    x = ir.var("x", (1, 512, 6, 6))
    xv = rng.standard_normal((1, 512, 6, 6)).astype(np.float32)
    mod = ir.IRModule.from_expr(ir.Function([x], op.nn.conv2d(x, ir.const(w))))
    wr = rounded(w, dtype)[:, :, 0, 0].astype(np.float64)
    ref = np.einsum("oc,nchw->nohw", wr, xv.astype(np.float64))
    mag = np.einsum("oc,nchw->nohw", np.abs(wr), np.abs(xv).astype(np.float64))
    cases.append(("conv2d_nchw", mod, (xv,), ref, mag, 512, 2))
    w3 = (weights((64, 32, 3, 3), 5) * 0.1).astype(np.float32)
    x = ir.var("x", (1, 32, 8, 8))
    xv = rng.standard_normal((1, 32, 8, 8)).astype(np.float32)
    mod = ir.IRModule.from_expr(ir.Function([x], op.nn.conv2d(x, ir.const(w3), padding=(1, 1))))
    ref, mag = conv_reference(xv, rounded(w3, dtype))
    cases.append(("conv2d_nhwc", mod, (xv,), ref, mag, 32 * 9, 3))

    for groups, channels in ((8, 64), (256, 256)):  # grouped and depthwise (their own kernels)
        wg = (weights((channels, channels // groups, 3, 3), 7) * 0.1).astype(np.float32)
        x = ir.var("x", (1, channels, 6, 6))
        xv = rng.standard_normal((1, channels, 6, 6)).astype(np.float32)
        conv = op.nn.conv2d(x, ir.const(wg), padding=(1, 1), groups=groups)
        mod = ir.IRModule.from_expr(ir.Function([x], conv))
        ref, mag = conv_reference(xv, rounded(wg, dtype), groups)
        cases.append((f"conv2d_groups{groups}", mod, (xv,), ref, mag, channels // groups * 9, 3))

    table = weights((500, 16), 6)  # an embedding table (take): widened as it is gathered
    ids = ir.var("ids", (3, 7), "int64")
    iv = rng.integers(0, 500, (3, 7)).astype(np.int64)
    mod = ir.IRModule.from_expr(ir.Function([ids], op.take(ir.const(table), ids, axis=0)))
    ref = rounded(table, dtype)[iv].astype(np.float64)
    cases.append(("take", mod, (iv,), ref, np.abs(ref), 1, 3))
    return cases


def conv_reference(x: np.ndarray, w: np.ndarray, groups: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """3x3, padding 1, stride 1 convolution in float64, and the same of the magnitudes."""
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # n c h w 3 3
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    kernels = w.astype(np.float64)
    parts = [(windows[:, g * cg:(g + 1) * cg], kernels[g * og:(g + 1) * og]) for g in range(groups)]
    ref = np.concatenate([np.einsum("nchwij,ocij->nohw", d, k) for d, k in parts], axis=1)
    mag = np.concatenate([np.einsum("nchwij,ocij->nohw", np.abs(d), np.abs(k)) for d, k in parts], axis=1)
    return ref, mag


@pytest.mark.parametrize("dtype", HALF)
def test_compiled_outputs_match_numpy_on_the_rounded_weights(dtype, codegen_ctx):
    for name, mod, inputs, ref, magnitude, depth, opt_level in contraction_cases(dtype):
        lib = build(mod, codegen_ctx, dtype, opt_level)
        out = lib(*inputs)
        assert_within_rounding(out, ref, magnitude, depth)
        # and it is not the float32 model: the rounding of the weights shows
        exact = build(mod, codegen_ctx, "float32", opt_level)(*inputs)
        assert not np.array_equal(out, exact), name


def kernel_c(mod: ir.IRModule, config: dict, name: str, **extra) -> str:
    """The C of kernel ``name`` of ``mod`` built with bfloat16 weights."""
    with PassContext(opt_level=3, config={**config, "codegen.weight_dtype": "bfloat16", **extra}):
        compiled = compile_pipeline()(mod)
    return kernel_c_source(compiled[name])


def scratch_bytes(c_source: str) -> list[int]:
    """The sizes of the float buffers a kernel's C allocates (heap and stack)."""
    sizes = [int(n) for n in re.findall(r"malloc\((\d+)\)", c_source)]
    return sizes + [4 * int(n) for n in re.findall(r"float \w+\[(\d+)\];", c_source)]


@pytest.mark.parametrize("blas", [True, False])
def test_a_small_weight_is_widened_once_per_call(blas, codegen_ctx):
    """A weight of at most PANEL_ELEMENTS is widened into a float32 scratch of its size
    once per call (no more than one GEMM panel), not at each of its many loads."""
    w = weights((40, 300), 1)
    x = ir.var("x", (16, 300))
    xv = np.random.default_rng(2).standard_normal((16, 300)).astype(np.float32)
    mod = ir.IRModule.from_expr(ir.Function([x], op.nn.dense(x, ir.const(w))))
    c_source = kernel_c(mod, codegen_ctx, "fused_nn_dense", **{"codegen.blas": blas})
    assert c_source.count("rp_bf16_load(p1[") == 1  # the one widening loop
    assert max(scratch_bytes(c_source)) == w.nbytes
    out = build(mod, codegen_ctx, "bfloat16", **{"codegen.blas": blas})(xv)
    wr = rounded(w, "bfloat16").astype(np.float64)
    assert_within_rounding(out, xv.astype(np.float64) @ wr.T, np.abs(xv) @ np.abs(wr).T, 300)


def test_loop_nests_widen_a_large_weight_as_they_load_it(codegen_ctx):
    """Without BLAS, a weight larger than a panel is read in place by the loop nest,
    each element widened as it is loaded: no float32 copy of it."""
    w = weights((300, 600), 1)
    assert w.size > PANEL_ELEMENTS
    x = ir.var("x", (3, 600))
    xv = np.random.default_rng(2).standard_normal((3, 600)).astype(np.float32)
    mod = ir.IRModule.from_expr(ir.Function([x], op.nn.dense(x, ir.const(w))))
    c_source = kernel_c(mod, codegen_ctx, "fused_nn_dense", **{"codegen.blas": False})
    assert "rp_bf16_load(p1[" in c_source and not any(n >= w.nbytes / 2 for n in scratch_bytes(c_source))
    out = build(mod, codegen_ctx, "bfloat16", **{"codegen.blas": False})(xv)
    wr = rounded(w, "bfloat16").astype(np.float64)
    assert_within_rounding(out, xv.astype(np.float64) @ wr.T, np.abs(xv) @ np.abs(wr).T, 600)


def mlp_module(sizes: tuple[int, ...] = (256, 512, 384, 10)) -> ir.IRModule:
    x = ir.var("x", (2, sizes[0]))
    h: ir.Expr = x
    for i, (k, n) in enumerate(zip(sizes, sizes[1:])):
        h = op.nn.bias_add(op.nn.dense(h, ir.const(weights((n, k), i))), ir.const(weights((n,), 10 + i)))
        h = op.nn.relu(h) if i < len(sizes) - 2 else h
    return ir.IRModule.from_expr(ir.Function([x], h))


@pytest.mark.parametrize("dtype", HALF)
def test_the_weights_file_halves(dtype, codegen_ctx, tmp_path):
    mod = mlp_module()
    sizes = {}
    for weight_dtype in ("float32", dtype):
        path = tmp_path / f"{weight_dtype}.so"
        build(mod, codegen_ctx, weight_dtype).export_library(path)
        sizes[weight_dtype] = (tmp_path / f"{weight_dtype}.so{WEIGHTS_SUFFIX}").stat().st_size
    matrices = 256 * 512 + 512 * 384 + 384 * 10
    assert sizes["float32"] >= 4 * matrices
    # every matrix in 16 bits; the biases (906 floats) and alignment are what is left
    assert 2 * matrices <= sizes[dtype] <= 2 * matrices + 4 * 906 + 1024
    assert sizes[dtype] / sizes["float32"] < 0.51


def test_no_float32_copy_of_a_weight_at_run_time(codegen_ctx):
    """The workspace is the float32 build's, the weight reaches the kernel as uint16_t, and
    the kernel's only float scratch is one panel, far smaller than the weight."""
    mod = mlp_module((1024, 2048, 10))
    f32, bf16 = build(mod, codegen_ctx, "float32"), build(mod, codegen_ctx, "bfloat16")
    assert bf16.metadata["workspace_bytes"] == f32.metadata["workspace_bytes"]
    with PassContext(opt_level=3, config={**codegen_ctx, "codegen.weight_dtype": "bfloat16"}):
        compiled = compile_pipeline()(mod)
    weight_bytes = 2048 * 1024 * 4
    kernels = [kernel_c_source(f) for f in compiled.functions.values() if isinstance(f, PrimFunc)]
    dense = next(c for c in kernels if "static int fused_nn_dense_nn_bias_add_nn_relu(" in c)
    assert "const uint16_t* restrict p1" in dense and "rp_bf16_load(p1[" in dense
    scratch = scratch_bytes(dense)
    assert scratch and max(scratch) <= PANEL_ELEMENTS * 4 < weight_bytes / 4


def test_a_gemm_on_a_16_bit_parameter_needs_widen_gemm_operands(codegen_ctx):
    mod = mlp_module((256, 1024, 10))
    message = "a GEMM reads the float16/bfloat16 parameter 'p1'; run WidenGemmOperands first"
    with pytest.raises(IRError, match=message):
        with PassContext(config={**codegen_ctx, "codegen.weight_dtype": "bfloat16"},
                         disabled_pass=["WidenGemmOperands"]):
            passinfra.build(mod)


# --------------------------------------------------------------------------- command line


def raypass(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The console script in a subprocess, as a user runs it (a private Ray if any)."""
    env = dict(os.environ, RAY_ADDRESS="local")
    command = [str(RAYPASS), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_the_cli_flag_compiles_and_runs_a_model_with_16_bit_weights(tmp_path):
    import onnxruntime as ort
    from onnx import numpy_helper

    from passinfra.frontend.zoo import zoo_spec

    spec = "zoo:mlp?batch=2&in_features=256&hidden=256"
    common = ("--backend", "local", "--cache-dir", "cache")
    for name, dtype in (("f32.so", "float32"), ("bf16.so", "bfloat16")):
        result = raypass("compile", spec, "-o", name, *common, "--config", f"codegen.weight_dtype={dtype}",
                         cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    f32, bf16 = ((tmp_path / f"{n}{WEIGHTS_SUFFIX}").stat().st_size for n in ("f32.so", "bf16.so"))
    assert bf16 / f32 < 0.51

    x = np.random.default_rng(3).standard_normal((2, 256)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ran = raypass("run", "bf16.so", "--input", "input=x.npy", "--output", "out", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    out = np.load(tmp_path / "out" / "output_0.npy")

    # onnxruntime on the model with its matrices rounded the same way
    model = zoo_spec(spec)
    for init in model.graph.initializer:
        value = numpy_helper.to_array(init)
        if value.ndim == 2 and value.size >= MIN_WEIGHT_ELEMENTS:
            init.CopyFrom(numpy_helper.from_array(rounded(value, "bfloat16"), init.name))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = session.run(None, {"input": x})
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)  # softmax outputs, float32 sums

    bad = raypass("compile", spec, "-o", "bad.so", *common, "--config", "codegen.weight_dtype=int8",
                  cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "raypass: error: config 'codegen.weight_dtype' must be one of "
        "'float32', 'bfloat16', 'float16'; got 'int8'"
    ]


# --------------------------------------------------------------------------- parallel = sequential


def test_ray_workers_print_the_same_ir(ray_scheduler, codegen_ctx):
    mod = mlp_module((512, 1024, 10))
    pipeline = compile_pipeline()
    with PassContext(opt_level=3, config={**codegen_ctx, "codegen.weight_dtype": "bfloat16"}):
        local = pipeline(mod)
        remote = ray_scheduler(num_workers=2).run(pipeline, mod)
    assert remote.astext() == local.astext()
    text = remote.astext()
    assert "Tensor[(1024, 512), bfloat16]" in text and "p1_panel" in text  # 16-bit weights, widened
