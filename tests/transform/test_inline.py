"""Inline: calls of functions marked Inline are replaced by their bodies."""

from __future__ import annotations

import numpy as np
import pytest

from passinfra import ir
from passinfra.ir import op
from passinfra.runtime.interpreter import evaluate
from passinfra.transform import get_pass
from passinfra.transform.builtin.inline import Inline, InlineCycleError
from tests.transform.pass_equivalence import assert_pass_preserves_semantics, property_test, run_on_chain

pytestmark = pytest.mark.usefixtures("default_recursion_limit")


def square_plus_one() -> ir.Function:
    a, t = ir.var("a", (2,)), ir.Var("t")
    return ir.Function([a], ir.Let(t, op.multiply(a, a), op.add(t, ir.const(1.0)))).with_attr("Inline", True)


def test_atomic_args_are_substituted_and_others_bound_by_a_let():
    x = ir.var("x", (2,))
    sq = ir.GlobalVar("sq")
    main = ir.Function([x], ir.Call(sq, [ir.Call(sq, [x])]))
    after = assert_pass_preserves_semantics(Inline, ir.IRModule({"sq": square_plus_one(), "main": main}))
    assert [gv.name_hint for gv in after.functions] == ["main"]  # no longer referenced: removed
    t1, a2, t2 = ir.Var("t"), ir.var("a", (2,)), ir.Var("t")
    # the inner call's binding floats out of the argument: one flat Let chain
    expected = ir.Function([x], ir.Let(t1, op.multiply(x, x), ir.Let(
        a2, op.add(t1, ir.const(1.0)), ir.Let(t2, op.multiply(a2, a2), op.add(t2, ir.const(1.0))))))
    ir.assert_structural_equal(after["main"], expected)


def test_nested_inline_functions_and_non_inline_callees():
    x, y, z = ir.var("x", (2,)), ir.var("y", (2,)), ir.var("z", (2,))
    sq, outer, plain = ir.GlobalVar("sq"), ir.GlobalVar("outer"), ir.GlobalVar("plain")
    mod = ir.IRModule({
        "sq": square_plus_one(),
        "outer": ir.Function([y], op.exp(ir.Call(sq, [y]))).with_attr("Inline", 1),
        "plain": ir.Function([z], ir.Call(outer, [z])),
        "main": ir.Function([x], ir.Tuple([ir.Call(plain, [x]), ir.Call(outer, [x])])),
    })
    after = assert_pass_preserves_semantics(Inline, mod)
    assert [gv.name_hint for gv in after.functions] == ["plain", "main"]
    for func in after.functions.values():
        callees = {n.op for n in ir.iter_post_order(func) if isinstance(n, ir.Call)}
        assert sq not in callees and outer not in callees
    ir.verify_well_formed(after)  # each inlining bound fresh vars


def _three_params_with_a_let() -> ir.Function:
    a, b, c, v = ir.var("a", (2,)), ir.var("b", (2,)), ir.var("c", (2,)), ir.var("v", (2,))
    body = ir.Let(v, op.negative(c), op.add(op.multiply(v, a), b))
    return ir.Function([a, b, c], body).with_attr("Inline", True)


def test_an_inlined_argument_passed_twice_binds_its_vars_once():
    """f(x, g, g) with g an inlined call (a Let chain): found by the property test,
    which bound g's vars once per argument position."""
    x = ir.var("x", (2,))
    f = ir.GlobalVar("f")
    inner = ir.Call(f, [op.exp(x), op.tanh(x), op.negative(x)])
    main = ir.Function([x], ir.Call(f, [op.exp(x), inner, inner]))
    mod = ir.IRModule({"f": _three_params_with_a_let(), "main": main})
    after = assert_pass_preserves_semantics(Inline, mod)
    assert [gv.name_hint for gv in after.functions] == ["main"]


def test_an_inlined_argument_shared_by_two_calls_binds_fresh_vars_at_the_second():
    x = ir.var("x", (2,))
    f = ir.GlobalVar("f")
    inner = ir.Call(f, [op.exp(x), op.tanh(x), op.negative(x)])
    first = ir.Call(f, [inner, op.exp(x), x])
    second = ir.Call(f, [op.tanh(x), x, inner])
    main = ir.Function([x], ir.Tuple([first, second]))
    assert_pass_preserves_semantics(Inline, ir.IRModule({"f": _three_params_with_a_let(), "main": main}))


def test_an_inlined_argument_read_inside_another_argument_too_binds_fresh_vars():
    """f(tanh(h), h) with h an inlined call: found by the property test, which floated h's
    chain out of the second argument with h's own vars, still bound where tanh reads h."""
    x = ir.var("x", (2,))
    f = ir.GlobalVar("f")
    inner = ir.Call(f, [op.exp(x), op.tanh(x), op.negative(x)])
    main = ir.Function([x], ir.Call(f, [op.tanh(inner), inner, x]))
    assert_pass_preserves_semantics(Inline, ir.IRModule({"f": _three_params_with_a_let(), "main": main}))


def test_function_used_as_a_value_is_kept():
    x, sq = ir.var("x", (2,)), ir.GlobalVar("sq")
    mod = ir.IRModule({"sq": square_plus_one(), "main": ir.Function([x], ir.Tuple([ir.Call(sq, [x]), sq]))})
    after = Inline()(mod)
    assert "sq" in after


def test_recursive_inline_functions_raise_naming_the_cycle():
    a, b = ir.var("a", (2,)), ir.var("b", (2,))
    f, g = ir.GlobalVar("f"), ir.GlobalVar("g")
    mod = ir.IRModule({
        "f": ir.Function([a], ir.Call(g, [a]), ir.TensorType((2,), "float32")).with_attr("Inline", True),
        "g": ir.Function([b], ir.Call(f, [b]), ir.TensorType((2,), "float32")).with_attr("Inline", True),
    })
    with pytest.raises(InlineCycleError, match=r"f -> g -> f|g -> f -> g"):
        Inline()(mod)


def test_module_without_inline_functions_is_unchanged():
    x = ir.var("x", (2,))
    mod = ir.IRModule({"main": ir.Function([x], op.exp(x))})
    after = Inline()(mod)
    assert after["main"] is mod["main"]


def test_registered_with_opt_level_one():
    assert get_pass("Inline").info.opt_level == 1


def test_deep_chains():
    run_on_chain(Inline(), 30_000, "add")
    # 20,000 nested calls of an Inline function: a flat Let chain, evaluated iteratively
    x, a, t, inc = ir.var("x", (2,)), ir.var("a", (2,)), ir.Var("t"), ir.GlobalVar("inc")
    increment = ir.Function([a], ir.Let(t, op.add(a, ir.const(1.0)), t)).with_attr("Inline", True)
    acc: ir.Expr = x
    for _ in range(20_000):
        acc = ir.Call(inc, [acc])
    after = Inline()(ir.IRModule({"inc": increment, "main": ir.Function([x], acc)}))
    assert list(after.functions) == [ir.GlobalVar("main")]
    np.testing.assert_allclose(evaluate(after, np.zeros(2, "float32")), 20_000.0)


def inline_everything():
    """Marks every non-main function Inline, then inlines."""
    from passinfra.transform.decorators import module_pass

    def mark(mod, ctx):
        for gv, func in list(mod.items()):
            if gv.name_hint != "main":
                mod[gv] = func.with_attr("Inline", True)
        return Inline()(mod)

    return module_pass(mark, opt_level=1, name="InlineEverything")


test_inline_preserves_semantics = property_test(inline_everything)
