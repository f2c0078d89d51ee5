"""The op census: which operators a function calls, found once per function; the passes
that rewrite only some operators return a function without them untouched, unwalked."""

from __future__ import annotations

import gc
import weakref

import numpy as np

from passinfra import ir
from passinfra.codegen.passes.conv_transpose_as_conv import conv_transpose_as_conv
from passinfra.codegen.passes.dense_as_matmul import dense_as_matmul
from passinfra.ir import op
from passinfra.ir.op.registry import Op
from passinfra.ir.op_census import _CENSUS, calls_any, op_calls


def _classifier(rows: int) -> ir.IRModule:
    x = ir.var("x", (rows, 64))
    weight = ir.Constant.owning(np.ones((32, 64), np.float32))
    hidden = op.nn.relu(op.nn.dense(x, weight))
    return ir.IRModule.from_expr(ir.Function([x], op.add(hidden, hidden)))


def test_the_census_lists_each_operator_s_calls_once_and_is_remembered():
    func = _classifier(1)["main"]
    census = op_calls(func)
    assert {o.name for o in census} == {"nn.dense", "nn.relu", "add"}
    assert [call.op.name for call in census[Op.get("nn.relu")]] == ["nn.relu"]
    assert op_calls(func) is census  # one walk per function
    assert calls_any(func, (Op.get("nn.relu"), Op.get("nn.conv2d")))
    assert not calls_any(func, (Op.get("nn.conv2d_transpose"),))


def test_the_census_does_not_keep_its_function_alive():
    func = _classifier(1)["main"]
    op_calls(func)
    alive = weakref.ref(func)
    assert func in _CENSUS
    del func
    gc.collect()
    assert alive() is None


def test_passes_with_nothing_to_rewrite_return_the_function_itself():
    mod = _classifier(1)
    func = mod["main"]
    assert conv_transpose_as_conv(func, mod) is func  # no transposed convolution
    assert dense_as_matmul(func, mod, use_blas=True) is func  # one row: the dense stays
    wide = _classifier(64)
    rewritten = dense_as_matmul(wide["main"], wide, use_blas=True)
    assert Op.get("matmul") in op_calls(rewritten) and Op.get("nn.dense") not in op_calls(rewritten)
