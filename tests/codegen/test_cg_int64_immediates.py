"""Integer immediates in generated C keep their IR dtype's width."""

from __future__ import annotations

import numpy as np

from passinfra import ir
from passinfra.build import build
from passinfra.ir import op
from passinfra.runtime import evaluate
from passinfra.transform.context import PassContext


def test_int64_selects_of_small_immediates_multiply_in_64_bits(tmp_path):
    # C types an immediate that fits in 32 bits as int: a select of two of them, squared,
    # overflowed in 32 bits (65536 * 65536 gave 0) unless the select is cast to int64
    x = ir.var("x", (4, 6), "int64")
    chosen = op.where(op.greater(x, ir.const(np.int64(0))), ir.const(np.int64(65536)), ir.const(np.int64(1)))
    mod = ir.IRModule.from_expr(ir.Function([x], op.multiply(chosen, chosen)))
    data = np.random.default_rng(0).integers(-3, 3, (4, 6)).astype("int64")
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}):
        lib = build(mod)
    expected = evaluate(mod["main"], data)
    assert expected.max() == 2**32
    np.testing.assert_array_equal(lib(data), expected)
