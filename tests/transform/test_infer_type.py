"""InferType: a module pass caching types on the nodes."""

from __future__ import annotations

import pytest

from passinfra import ir
from passinfra.errors import IRTypeError
from passinfra.ir import op
from passinfra.transform import get_pass
from passinfra.transform.builtin.infer_type import InferType
from tests.transform.pass_equivalence import property_test, run_on_chain

pytestmark = pytest.mark.usefixtures("default_recursion_limit")


def test_new_module_object_with_the_same_functions_and_cached_types():
    x = ir.var("x", (2, 3))
    body = op.nn.relu(op.add(x, ir.const(1.0)))
    mod = ir.IRModule({"main": ir.Function([x], body)})
    after = InferType()(mod)
    assert after is not mod
    assert after["main"] is mod["main"]
    assert body.checked_type == ir.TensorType((2, 3), "float32")
    assert after["main"].checked_type == ir.FuncType([ir.TensorType((2, 3), "float32")], body.checked_type)


def test_type_error_propagates_naming_function_and_op():
    x, y = ir.var("x", (2, 3)), ir.var("y", (4,))
    mod = ir.IRModule({"bad": ir.Function([x, y], op.add(x, y))})
    with pytest.raises(IRTypeError) as info:
        InferType()(mod)
    assert "add" in str(info.value) and "bad" in str(info.value)


def test_registered_with_opt_level_zero():
    p = get_pass("InferType")
    assert p.info.name == "InferType" and p.info.opt_level == 0


def test_deep_chain_under_default_recursion_limit():
    after = run_on_chain(InferType(), 30_000, "add")
    assert after["main"].body.checked_type == ir.TensorType((2,), "float32")
    run_on_chain(InferType(), 20_000, "let")


test_types_every_random_program = property_test(InferType)
