"""Issue 31: kernels compiled once for symbolic sizes, run at many sizes.

Each case is a graph whose body fuses into one primitive function with symbolic
dimensions; it is lowered and compiled once (the compile pipeline up to CodegenC), then
run through its ``_packed`` entry at sizes including 0, 1 and sizes that are not a
multiple of a vector's lanes, against the graph interpreter on the same inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from cg_c_support import CompiledKernel

from passinfra import tir
from passinfra.build import COMPILE_PIPELINE
from passinfra.codegen.cc_driver import CompilerSettings
from passinfra.ir import DimVar, op
from passinfra.ir.expr import Call, Function, const, var
from passinfra.ir.module import IRModule
from passinfra.runtime.interpreter import evaluate
from passinfra.runtime.shape_binding import bound_shape
from passinfra.tir.evaluator import run_prim_func
from passinfra.transform import PassContext
from passinfra.transform.registry import get_pass

ROWS = DimVar("rows", 0, 4096)
SEQ = DimVar("seq", 1)


def _kernel(mod: IRModule) -> tuple[tir.PrimFunc, list[int]]:
    """The one PrimFunc of ``mod`` after the compile pipeline up to C, and the positions
    among main's parameters of the arguments main passes it."""
    with PassContext(opt_level=3):
        for name in COMPILE_PIPELINE[: COMPILE_PIPELINE.index("CodegenC") + 1]:
            if name != "Parallelize":  # a kernel alone has no thread pool to link (the library tests do)
                mod = get_pass(name)(mod)
    kernels = [f for f in mod.functions.values() if isinstance(f, tir.PrimFunc)]
    assert len(kernels) == 1, [gv.name_hint for gv in mod.functions]
    main = mod["main"]
    assert isinstance(main.body, Call), "main is one kernel call"
    return kernels[0], [list(main.params).index(arg) for arg in main.body.args]


def _check(tmp_path, body, params: list, sizes_list: list[dict[str, int]], rtol: float = 1e-5,
           compile_c: bool = True) -> None:
    """Compile ``body`` over ``params`` once; at each binding of ``sizes_list`` the C
    kernel, the loop-level interpreter and the graph interpreter agree. ``compile_c``
    False: the loop-level interpreter only (a kernel calling the convolution runtime
    needs the whole library; the library tests run those)."""
    mod = IRModule.from_expr(Function(params, body))
    func, order = _kernel(mod)
    assert [v.name for v in func.dims] == sorted({n for sizes in sizes_list for n in sizes})
    settings = CompilerSettings(cache_dir=str(tmp_path / "cache"))
    kernel = CompiledKernel(func, tmp_path, settings) if compile_c else None
    rng = np.random.default_rng(0)
    for sizes in sizes_list:
        shapes = [bound_shape(p.type_annotation, sizes) for p in params]
        inputs = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
        expected = np.asarray(evaluate(mod, *inputs))
        args = [inputs[k] for k in order]
        if kernel is not None:
            out = np.full(expected.shape, np.nan, np.float32)
            assert kernel(*args, out, sizes=sizes) == 0
            np.testing.assert_allclose(out, expected, rtol=rtol, atol=1e-5, err_msg=str(sizes))
        if expected.size <= 2048:
            again = run_prim_func(func, *args, sizes=sizes)
            np.testing.assert_allclose(again.reshape(expected.shape), expected, rtol=rtol, atol=1e-5)


def _weight(name: str, shape: tuple[int, ...]):
    return var(name, shape)


ROW_SIZES = [{"rows": n} for n in (0, 1, 3, 8, 17, 100)]


def test_elementwise_with_broadcast_over_symbolic_rows(tmp_path) -> None:
    x, bias = var("x", (ROWS, 13)), _weight("bias", (13,))
    body = op.tanh(op.multiply(op.add(x, bias), const(np.float32(0.5))))
    _check(tmp_path, body, [x, bias], ROW_SIZES)


def test_dense_epilogue_runs_blas_with_runtime_rows(tmp_path) -> None:
    x, weight, bias = var("x", (ROWS, 48)), _weight("w", (40, 48)), _weight("b", (40,))
    body = op.nn.relu(op.add(op.nn.dense(x, weight), bias))
    _check(tmp_path, body, [x, weight, bias], ROW_SIZES, rtol=1e-4, compile_c=False)


def test_matmul_of_symbolic_rows_runs_on_the_microkernels_at_every_size(tmp_path) -> None:
    from passinfra.tir.intrinsics import is_conv

    x, weight, bias = var("x", (ROWS, 32)), _weight("w", (32, 64)), _weight("b", (64,))
    body = op.add(op.matmul(x, weight), bias)
    func, _ = _kernel(IRModule.from_expr(Function([x, weight, bias], body)))
    guards = [s for s in _stmts(func.body) if isinstance(s, tir.IfThenElse)]
    # the microkernel call, skipped when there are no rows (it takes at least one)
    assert len(guards) == 1 and "rows > 0" in tir.printer.tir_astext(guards[0].cond)
    assert is_conv(guards[0].then_case.value)
    _check(tmp_path, body, [x, weight, bias], ROW_SIZES, rtol=1e-4, compile_c=False)


@pytest.mark.parametrize("reduce", ["softmax", "sum"])
def test_softmax_and_reduction_over_a_symbolic_axis(tmp_path, reduce) -> None:
    x = var("x", (2, SEQ, SEQ))
    body = op.nn.softmax(x, axis=-1) if reduce == "softmax" else op.sum(op.exp(x), axis=[-1])
    sizes = [{"seq": n} for n in (1, 2, 7, 33)]
    _check(tmp_path, body, [x], sizes, rtol=1e-4)


def test_concatenate_along_a_symbolic_axis(tmp_path) -> None:
    past, seq = DimVar("past", 0, 512), DimVar("seq", 1, 512)
    cache, new = var("cache", (2, past, 8)), var("new", (2, seq, 8))
    body = op.multiply(op.concatenate([cache, new], axis=1), const(np.float32(2.0)))
    sizes = [{"past": p, "seq": s} for p, s in ((0, 1), (5, 1), (3, 4), (17, 9))]
    _check(tmp_path, body, [cache, new], sizes)


def _stmts(stmt: tir.Stmt):
    from passinfra.tir.functor import iter_stmts

    return list(iter_stmts(stmt))


def test_a_kernel_with_sizes_round_trips_the_wire_format_and_structural_equality() -> None:
    import pickle

    from passinfra.tir.structural import tir_structural_equal

    x = var("x", (ROWS, SEQ, 4))
    func, _ = _kernel(IRModule.from_expr(Function([x], op.nn.relu(x))))
    again = pickle.loads(pickle.dumps(func))  # the wire format
    assert [v.name for v in again.dims] == ["rows", "seq"]
    assert tir_structural_equal(func, again)
    assert func.astext() == again.astext()
    assert "rows: size" in func.astext()


@pytest.mark.parametrize("shape", [(ROWS, 4), (4, ROWS)])
def test_size_variables_are_bound_parameters_of_the_kernel(shape) -> None:
    from passinfra.tir.verify import verify_prim_func

    x = var("x", shape)
    func, _ = _kernel(IRModule.from_expr(Function([x], op.exp(x))))
    verify_prim_func(func)
    with pytest.raises(Exception, match="rows"):
        verify_prim_func(tir.PrimFunc(func.params, func.body, func.attrs))  # the size left unbound


def test_a_transpose_to_a_symbolic_innermost_axis_is_tiled_in_whole_tiles_and_a_rest(tmp_path) -> None:
    # the keys of a KV cache turned to [.., head_dim, past + seq]: tiles of 16 x 8, then the
    # positions past the last whole tile
    x = var("x", (2, SEQ, 16))
    body = op.transpose(x, axes=(0, 2, 1))
    func, _ = _kernel(IRModule.from_expr(Function([x], body)))
    assert any(isinstance(s, tir.For) and isinstance(s.extent, tir.FloorDiv) for s in _stmts(func.body))
    _check(tmp_path, body, [x], [{"seq": n} for n in (1, 15, 16, 17, 40)])
