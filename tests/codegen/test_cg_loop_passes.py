"""Loop passes: Before/Expected by alpha-equivalence, and numeric checks with the TIR
interpreter (each pass keeps the results of hand-written kernels)."""

from __future__ import annotations

import numpy as np
import pytest
from cg_tir_samples import loop, row_sum, transpose, vector_add

from passinfra import ir
from passinfra.codegen.transform import (
    RemoveNoOp,
    Simplify,
    StorageFlatten,
    UnrollLoop,
    UnrollLoopConfig,
    VectorizeLoop,
)
from passinfra.tir import (
    EQ,
    GE,
    LT,
    Add,
    Allocate,
    Buffer,
    BufferStore,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Max,
    Min,
    Mul,
    PrimFunc,
    Select,
    SeqStmt,
    TVar,
)
from passinfra.tir.evaluator import run_prim_func
from passinfra.tir.functor import iter_expr_post_order, same_expr
from passinfra.tir.structural import assert_tir_equal, tir_structural_equal
from passinfra.tir.verify import verify_prim_func
from passinfra.transform import PassConfigTypeError, PassContext, Sequential, get_pass


def run_pass(pass_obj, func: PrimFunc, config=None) -> PrimFunc:
    mod = ir.IRModule({"k": func})
    with PassContext(opt_level=3, config=config):
        return pass_obj(mod)["k"]


def store_func(value, extent: int = 8, dtype: str = "int64") -> tuple[PrimFunc, TVar, Buffer]:
    """A one-loop kernel writing ``value(i)`` to out[i] (helper for Simplify cases)."""
    out = Buffer("out", (64,), dtype)
    i = TVar("i")
    return PrimFunc([out], loop(i, extent, BufferStore(out, value(i), (i,))), {"num_inputs": 0}), i, out


# ----------------------------------------------------------------------------- registry


def test_passes_are_registered_with_their_opt_levels() -> None:
    levels = {"Simplify": 0, "StorageFlatten": 0, "RemoveNoOp": 0, "UnrollLoop": 1, "VectorizeLoop": 1}
    for name, level in levels.items():
        made = get_pass(name)
        assert made.info.name == name and made.info.opt_level == level


# ----------------------------------------------------------------------------- Simplify


@pytest.mark.parametrize(
    ("before", "expected"),
    [
        (lambda i: i * 1 + 0, lambda i: i),
        (lambda i: (i * 2) * 3, lambda i: i * 6),
        (lambda i: IntImm(2) * i + IntImm(3) * IntImm(4), lambda i: i * 2 + 12),
        (lambda i: i * 0 + 5, lambda i: IntImm(5)),
        (lambda i: (i + 1) + 2, lambda i: i + 3),
        (lambda i: FloorDiv(i, IntImm(1)) + FloorMod(i, IntImm(1)), lambda i: i),
        (lambda i: FloorDiv(i * 4 + 3, IntImm(4)), lambda i: i),           # 3 < 4
        (lambda i: FloorMod(i * 4 + 3, IntImm(4)), lambda i: IntImm(3)),
        (lambda i: FloorDiv(FloorDiv(i, IntImm(2)), IntImm(3)), lambda i: FloorDiv(i, IntImm(6))),
        (lambda i: FloorMod(FloorMod(i, IntImm(8)), IntImm(4)), lambda i: FloorMod(i, IntImm(4))),
        (lambda i: FloorDiv(i, IntImm(8)), lambda i: IntImm(0)),             # i in [0, 8)
        (lambda i: FloorDiv(i * 8 + i, IntImm(4)), lambda i: i * 2 + FloorDiv(i, IntImm(4))),  # any i
        (lambda i: FloorMod(FloorDiv(i * 128 + 5, IntImm(2)), IntImm(64)), lambda i: IntImm(2)),
        (lambda i: Min(IntImm(3), IntImm(5)) + Max(i, IntImm(9)), lambda i: IntImm(3) + 9),
        (lambda i: i - i, lambda i: IntImm(0)),
    ],
)
def test_simplify_index_arithmetic(before, expected) -> None:
    func, i, out = store_func(before)
    result = run_pass(Simplify(), func)
    want = PrimFunc([out], loop(i, 8, BufferStore(out, expected(i), (i,))), {"num_inputs": 0})
    want = run_pass(Simplify(), want)  # the expected side in canonical form too (3 + 9 -> 12)
    assert_tir_equal(result, want)


def test_simplify_nested_div_mod_with_loop_extents() -> None:
    a = Buffer("a", (3, 4), "float32")
    flat = Buffer("flat", (12,), "float32")
    i, j = TVar("i"), TVar("j")
    index = i * 4 + j
    before = PrimFunc([flat, a], loop(i, 3, loop(j, 4, BufferStore(
        a, flat.load(index), (FloorDiv(index, IntImm(4)), FloorMod(index, IntImm(4)))))), {"num_inputs": 1})
    expected = PrimFunc([flat, a], loop(i, 3, loop(j, 4, BufferStore(a, flat.load(index), (i, j)))),
                        {"num_inputs": 1})
    assert_tir_equal(run_pass(Simplify(), before), expected)


def test_simplify_keeps_div_mod_it_cannot_prove() -> None:
    # j ranges over [0, 5): (i*4 + j) // 4 is not i, and (i*4 + j) % 4 is not j
    out = Buffer("out", (3, 5), "int64")
    i, j = TVar("i"), TVar("j")
    index = i * 4 + j
    func = PrimFunc([out], loop(i, 3, loop(j, 5, BufferStore(
        out, FloorDiv(index, IntImm(4)) * 10 + FloorMod(index, IntImm(4)), (i, j)))), {"num_inputs": 0})
    simplified = run_pass(Simplify(), func)
    text = str(simplified)
    # the multiple of 4 may leave the mod and the division (both exact for any j), but
    # j's own division must stay
    assert "out[i, j] = (i + j // 4) * 10 + j % 4" in text, text
    expected = np.array([[(4 * r + c) // 4 * 10 + (4 * r + c) % 4 for c in range(5)] for r in range(3)])
    np.testing.assert_array_equal(run_prim_func(simplified), expected)


def test_simplify_does_not_apply_unsafe_float_identities() -> None:
    a = Buffer("a", (4,), "float32")
    i = TVar("i")
    func = PrimFunc([a], loop(i, 4, BufferStore(a, a.load(i) * FloatImm(0.0) + FloatImm(0.0), (i,))))
    assert run_pass(Simplify(), func) is func
    folded = PrimFunc([a], BufferStore(a, FloatImm(1.5) * FloatImm(2.0), (IntImm(0),)))
    assert same_expr(run_pass(Simplify(), folded).body.value, FloatImm(3.0))


def test_simplify_extent_one_loop_becomes_substitution_and_decides_comparisons() -> None:
    a = Buffer("a", (4, 1), "float32")
    i, j = TVar("i"), TVar("j")
    before = PrimFunc([a], loop(i, 4, loop(j, 1, IfThenElse(
        LT(i, IntImm(4)), BufferStore(a, FloatImm(1.0), (i, j)), None))))
    store = BufferStore(a, FloatImm(1.0), (i, IntImm(0)))
    expected = PrimFunc([a], loop(i, 4, IfThenElse(IntImm(1, "bool"), store)))
    assert_tir_equal(run_pass(Simplify(), before), expected)


# ----------------------------------------------------------------------- StorageFlatten


def test_storage_flatten_row_major() -> None:
    x, y = Buffer("x", (3, 4), "float32"), Buffer("y", (4, 3), "float32")
    i, j = TVar("i"), TVar("j")
    before = transpose(3, 4)
    fx, fy = Buffer("x", (12,), "float32"), Buffer("y", (12,), "float32")
    i, j = TVar("i"), TVar("j")
    expected = PrimFunc([fx, fy], loop(i, 4, loop(j, 3, BufferStore(fy, fx.load(j * 4 + i), (i * 3 + j,)))),
                        {"num_inputs": 1, "global_symbol": "transpose", "flattened": True})
    result = run_pass(StorageFlatten(), before)
    assert_tir_equal(result, expected)
    verify_prim_func(result)
    assert result.attrs["flattened"] is True
    assert run_pass(StorageFlatten(), result) is result
    del x, y


def test_storage_flatten_scalar_and_allocated_buffers() -> None:
    result = run_pass(StorageFlatten(), row_sum(2, 3))
    verify_prim_func(result, flattened=True)
    acc = result.body.body.buffer
    assert acc.shape == (1,) and acc.name == "acc"
    indices = result.body.body.body.stmts[0].indices
    assert len(indices) == 1 and same_expr(indices[0], IntImm(0))


# --------------------------------------------------------------------------- UnrollLoop


def test_unroll_explicit_marked_loop() -> None:
    a = Buffer("a", (3,), "float32")
    i = TVar("i")
    store = BufferStore(a, FloatImm(1.0), (i,))
    before = PrimFunc([a], For(i, IntImm(0), IntImm(3), ForKind.UNROLLED, store))
    expected = PrimFunc([a], SeqStmt(tuple(BufferStore(a, FloatImm(1.0), (IntImm(k),)) for k in range(3))))
    assert_tir_equal(run_pass(UnrollLoop(), before), expected)


def test_unroll_auto_max_step_counts_nested_steps() -> None:
    func = transpose(2, 2)  # 2 x 2 = 4 innermost steps
    assert run_pass(UnrollLoop(), func, {"tir.UnrollLoop": {"auto_max_step": 3}}).body.kind is ForKind.SERIAL
    unrolled = run_pass(UnrollLoop(), func, {"tir.UnrollLoop": {"auto_max_step": 4}})
    assert type(unrolled.body) is SeqStmt and len(unrolled.body.stmts) == 2
    verify_prim_func(unrolled)
    x = np.arange(4, dtype="float32").reshape(2, 2)
    np.testing.assert_array_equal(run_prim_func(unrolled, x), x.T)


def test_unroll_marks_instead_when_not_explicit() -> None:
    config = {"tir.UnrollLoop": UnrollLoopConfig(auto_max_step=8, explicit_unroll=False)}
    result = run_pass(UnrollLoop(), vector_add(8), config)
    assert result.body.kind is ForKind.UNROLLED
    assert run_pass(UnrollLoop(), vector_add(8)).body.kind is ForKind.SERIAL  # default auto_max_step 0


def test_unroll_copies_get_fresh_inner_loop_vars() -> None:
    a = Buffer("a", (2, 3), "float32")
    i, j = TVar("i"), TVar("j")
    before = PrimFunc([a], For(i, IntImm(0), IntImm(2), ForKind.UNROLLED,
                               loop(j, 3, BufferStore(a, FloatImm(1.0), (i, j)))))
    result = run_pass(UnrollLoop(), before)
    first, second = result.body.stmts
    assert first.loop_var is not second.loop_var
    verify_prim_func(result)


def test_unrolled_copies_decide_conditions_on_the_enclosing_loops() -> None:
    # a pooling tap: out[i] = max over k of (2*i + k - 1 >= 0 ? x[max(2*i + k - 1, 0)] : -inf);
    # once k is a constant, taps k >= 1 hold for every i >= 0: no Select, no clamp left
    x, out = Buffer("x", (9,), "float32"), Buffer("out", (4,), "float32")
    i, k = TVar("i"), TVar("k")
    index = Add(Add(Mul(i, IntImm(2)), k), IntImm(-1))
    tap = Select(GE(index, IntImm(0)), x.load(Max(index, IntImm(0))), FloatImm(float("-inf")))
    body = loop(i, 4, SeqStmt((
        BufferStore(out, FloatImm(float("-inf")), (i,)),
        For(k, IntImm(0), IntImm(3), ForKind.UNROLLED, BufferStore(out, Max(out.load(i), tap), (i,))),
    )))
    func = PrimFunc([x, out], body, {"num_inputs": 1})
    result = run_pass(UnrollLoop(), func)
    verify_prim_func(result)
    taps = result.body.body.stmts[1].stmts
    kinds = [[type(node).__name__ for node in iter_expr_post_order(tap_store.value)] for tap_store in taps]
    assert "Select" in kinds[0] and all("Select" not in names for names in kinds[1:])
    data = np.arange(9, dtype=np.float32)[::-1].copy()
    np.testing.assert_array_equal(run_prim_func(result, data), run_prim_func(func, data))


def test_unroll_config_errors_name_the_field() -> None:
    with pytest.raises(PassConfigTypeError, match="unknown field"):
        run_pass(UnrollLoop(), vector_add(), {"tir.UnrollLoop": {"max_step": 3}})
    with pytest.raises(PassConfigTypeError, match="field 'auto_max_step' expects int"):
        run_pass(UnrollLoop(), vector_add(), {"tir.UnrollLoop": {"auto_max_step": "3"}})
    with pytest.raises(PassConfigTypeError, match="field 'explicit_unroll' expects bool"):
        UnrollLoopConfig(explicit_unroll=1)


# ------------------------------------------------------------------------ VectorizeLoop


def test_vectorize_marks_elementwise_innermost_loop() -> None:
    result = run_pass(VectorizeLoop(), vector_add(8))
    assert result.body.kind is ForKind.VECTORIZED
    outer_inner = run_pass(VectorizeLoop(), run_pass(StorageFlatten(), transpose(3, 4)))
    assert outer_inner.body.kind is ForKind.SERIAL and outer_inner.body.body.kind is ForKind.VECTORIZED


def test_vectorize_never_marks_loops_with_dependences() -> None:
    a = Buffer("a", (9,), "float32")
    i = TVar("i")
    shifted = PrimFunc([a], loop(i, 8, BufferStore(a, a.load(i) * 2.0, (i + 1,))))
    assert run_pass(VectorizeLoop(), shifted).body.kind is ForKind.SERIAL
    # reduction: every iteration writes the same place
    assert run_pass(VectorizeLoop(), row_sum()).body.body.body.stmts[1].kind is ForKind.SERIAL
    # non-affine index and non-straight-line body
    modded = PrimFunc([a], loop(i, 8, BufferStore(a, FloatImm(0.0), (FloorMod(i, IntImm(3)),))))
    assert run_pass(VectorizeLoop(), modded).body.kind is ForKind.SERIAL
    branchy = PrimFunc([a], loop(i, 8, IfThenElse(EQ(i, IntImm(0)), BufferStore(a, FloatImm(0.0), (i,)))))
    assert run_pass(VectorizeLoop(), branchy).body.kind is ForKind.SERIAL


# --------------------------------------------------------------------------- RemoveNoOp


def test_remove_no_op() -> None:
    a = Buffer("a", (4,), "float32")
    i, j = TVar("i"), TVar("j")
    keep = BufferStore(a, FloatImm(1.0), (IntImm(0),))
    before = PrimFunc([a], SeqStmt((
        loop(i, 0, keep),
        SeqStmt(()),
        IfThenElse(IntImm(0, "bool"), keep, SeqStmt((keep, Evaluate(IntImm(3))))),
        loop(j, 4, BufferStore(a, a.load(j), (j,))),
        Allocate(Buffer("t", (2,), "float32"), Evaluate(FloatImm(0.0))),
    )))
    expected = PrimFunc([a], BufferStore(a, FloatImm(1.0), (IntImm(0),)))
    assert_tir_equal(run_pass(RemoveNoOp(), before), expected)
    assert run_pass(RemoveNoOp(), vector_add()) is not None
    everything = PrimFunc([a], loop(i, 0, keep))
    assert tir_structural_equal(run_pass(RemoveNoOp(), everything).body, SeqStmt(()))


def test_remove_no_op_keeps_effectful_evaluate_and_flips_empty_then() -> None:
    from passinfra.tir import Intrinsic, Not

    a = Buffer("a", (4,), "float32")
    call = Evaluate(Intrinsic("sgemm", (FloatImm(0.0),), "float32"))
    func = PrimFunc([a], IfThenElse(IntImm(1, "bool"), call, None))
    assert_tir_equal(run_pass(RemoveNoOp(), func), PrimFunc([a], call))
    i = TVar("i")
    cond = LT(i, IntImm(2))
    store = BufferStore(a, FloatImm(1.0), (i,))
    flip = PrimFunc([a], loop(i, 4, IfThenElse(cond, Evaluate(IntImm(0)), store)))
    expected = PrimFunc([a], loop(i, 4, IfThenElse(Not(cond), BufferStore(a, FloatImm(1.0), (i,)))))
    assert_tir_equal(run_pass(RemoveNoOp(), flip), expected)


# -------------------------------------------------------------------- numeric invariance


def _pipelines():
    return {
        "Simplify": [Simplify()],
        "StorageFlatten": [StorageFlatten()],
        "UnrollLoop": [UnrollLoop()],
        "VectorizeLoop": [VectorizeLoop()],
        "RemoveNoOp": [RemoveNoOp()],
        "all": [StorageFlatten(), Simplify(), UnrollLoop(), VectorizeLoop(), RemoveNoOp()],
    }


@pytest.mark.parametrize("pipeline", sorted(_pipelines()))
@pytest.mark.parametrize("make", [vector_add, row_sum, transpose], ids=lambda f: f.__name__)
def test_passes_keep_results(pipeline: str, make) -> None:
    func = make()
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(p.shape).astype(p.dtype) for p in func.params[: func.attrs["num_inputs"]]]
    expected = run_prim_func(func, *inputs)
    config = {"tir.UnrollLoop": {"auto_max_step": 4}}
    result = run_pass(Sequential(_pipelines()[pipeline]), func, config)
    verify_prim_func(result)
    outputs = [np.zeros(p.shape, p.dtype) for p in func.params[len(inputs):]]
    got = run_prim_func(result, *inputs, *outputs)
    np.testing.assert_array_equal(got, expected)


def test_simplify_reshape_style_div_mod() -> None:
    # (i*4 + 1) // 12 -> i // 3 and (i*4 + 1) % 12 -> i % 3 * 4 + 1, for any i >= 0
    value = lambda i: FloorDiv(i * 4 + 1, IntImm(12)) * 100 + FloorMod(i * 4 + 1, IntImm(12))  # noqa: E731
    func, _, _ = store_func(value, extent=20)
    result = run_pass(Simplify(), func)
    assert "out[i] = i // 3 * 100 + (i % 3 * 4 + 1)" in str(result), str(result)
    np.testing.assert_array_equal(run_prim_func(result), run_prim_func(func))
