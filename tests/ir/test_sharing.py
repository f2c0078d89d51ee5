"""A subexpression used several times is one node: visited, rewritten, printed and
evaluated once, and still one node after a text or pickle round trip."""

from __future__ import annotations

import collections
import pickle

import numpy as np
import pytest

from passinfra import evaluate, ir
from passinfra.ir import op
from passinfra.ir.op.registry import OpPattern, register_op

_EVALUATIONS: collections.Counter = collections.Counter()


def _counted_identity(args, attrs):
    _EVALUATIONS["test_sharing.counted"] += 1
    return np.array(args[0], copy=True)


# an op whose NumPy implementation counts how often the interpreter runs it
COUNTED = register_op(
    "test_sharing.counted",
    num_inputs=1,
    type_rel=lambda arg_types, attrs: arg_types[0],
    impl=_counted_identity,
    pattern=OpPattern.OPAQUE,
    override=True,
)


@pytest.fixture()
def shared_program():
    """``main(x) = s * negative(s) + s`` with ``s = exp(x)`` built once and used three
    times, inside a Let so sharing crosses a binding."""
    x = ir.var("x", (2, 3))
    shared = op.exp(x)
    bound = ir.Var("t")
    body = ir.Let(bound, op.multiply(shared, op.negative(shared)), op.add(bound, shared))
    return ir.IRModule({"main": ir.Function([x], body)}), shared


class CallCounter(ir.ExprVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.by_op: collections.Counter = collections.Counter()

    def visit_call(self, call: ir.Call) -> None:
        self.by_op[call.op.name] += 1
        super().visit_call(call)


class ExpToSigmoid(ir.ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.rewrites = 0

    def visit_call(self, call: ir.Call) -> ir.Expr:
        new = super().visit_call(call)
        if new.op is ir.Op.get("exp"):
            self.rewrites += 1
            return op.sigmoid(new.args[0])
        return new


def _uses_of(func: ir.Function, node: ir.Expr) -> list[ir.Expr]:
    """The nodes that take ``node`` as a direct child (with repeats)."""
    return [
        parent for parent in ir.iter_post_order(func) for child in ir.expr_children(parent) if child is node
    ]


def _the_exp(func: ir.Function, name: str = "exp") -> ir.Call:
    (node,) = [n for n in ir.iter_post_order(func) if isinstance(n, ir.Call) and n.op.name == name]
    return node


def test_visitor_visits_a_shared_call_once(shared_program):
    mod, _ = shared_program
    counter = CallCounter()
    counter.visit(mod["main"])
    assert counter.by_op == {"exp": 1, "multiply": 1, "negative": 1, "add": 1}


def test_mutator_rewrites_a_shared_call_once_and_keeps_it_shared(shared_program):
    mod, _ = shared_program
    mutator = ExpToSigmoid()
    new_main = mutator.visit(mod["main"])
    assert mutator.rewrites == 1
    sigmoid = _the_exp(new_main, "sigmoid")
    assert len(_uses_of(new_main, sigmoid)) == 3
    assert not [n for n in ir.iter_post_order(new_main) if isinstance(n, ir.Call) and n.op.name == "exp"]


def test_printer_defines_a_shared_call_once(shared_program):
    mod, _ = shared_program
    text = mod.astext()
    assert text.count("exp(") == 1
    assert text.count("negative(") == 1


@pytest.mark.parametrize("copy", ["parse", "pickle"], ids=str)
def test_round_trips_keep_sharing(shared_program, copy):
    mod, _ = shared_program
    restored = ir.parse(mod.astext()) if copy == "parse" else pickle.loads(pickle.dumps(mod))
    main = restored["main"]
    assert len(_uses_of(main, _the_exp(main))) == 3
    ir.assert_structural_equal(restored, mod)


def test_interpreter_evaluates_a_shared_call_once():
    x = ir.var("x", (3,))
    shared = ir.Call(COUNTED, [op.exp(x)])
    mod = ir.IRModule({"main": ir.Function([x], op.add(op.multiply(shared, shared), shared))})
    data = np.array([0.0, 1.0, -1.0], dtype="float32")
    _EVALUATIONS.clear()
    result = evaluate(mod, data)
    assert _EVALUATIONS["test_sharing.counted"] == 1
    e = np.exp(data)
    np.testing.assert_allclose(result, e * e + e, rtol=1e-6)

