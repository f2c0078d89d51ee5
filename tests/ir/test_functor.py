"""Functors: dispatch table, memoized visiting, functional update, no recursion bound."""

import sys

import pytest

from passinfra import ir
from passinfra.ir.op.registry import OpPattern, register_op

_PAIR = register_op(
    "test_functor.pair",
    num_inputs=2,
    type_rel=lambda types, attrs: types[0],
    impl=lambda args, attrs: args[0] + args[1],
    pattern=OpPattern.BROADCAST,
    override=True,
)


def pair(a, b):
    return ir.Call(_PAIR, [a, b])


class CountingVisitor(ir.ExprVisitor):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.kinds = []

    def visit_call(self, call):
        self.calls += 1
        super().visit_call(call)
        self.kinds.append("call")

    def visit_var(self, var):
        self.kinds.append(var.name_hint)


def test_visitor_visits_shared_node_once_in_post_order():
    x, y = ir.var("x"), ir.var("y")
    shared = pair(x, y)
    root = pair(shared, shared)
    v = CountingVisitor()
    v.visit(root)
    assert v.calls == 2
    assert v.kinds == ["x", "y", "call", "call"]


def test_identity_mutator_returns_same_objects():
    x = ir.var("x")
    branch = ir.If(ir.var("c"), ir.Tuple([x]), ir.TupleGetItem(ir.Tuple([x]), 0))
    body = ir.Let(ir.var("t"), pair(x, x), branch)
    f = ir.Function([x], body)
    assert ir.ExprMutator().visit(f) is f


class SwapArgs(ir.ExprMutator):
    def __init__(self):
        super().__init__()
        self.rewrites = 0

    def visit_call(self, call):
        self.rewrites += 1
        args = [self.visit(a) for a in call.args]
        return ir.Call(call.op, list(reversed(args)), call.attrs)


def test_mutator_rewrites_shared_node_once_and_keeps_sharing():
    x, y = ir.var("x"), ir.var("y")
    shared = pair(x, y)
    root = ir.Tuple([shared, shared])
    m = SwapArgs()
    out = m.visit(root)
    assert m.rewrites == 1
    assert out.fields[0] is out.fields[1]
    assert out.fields[0].args == (y, x)


def test_mutator_shares_unchanged_subtrees():
    x, y = ir.var("x"), ir.var("y")
    left = pair(x, x)
    root = ir.Tuple([left, y])

    class ReplaceY(ir.ExprMutator):
        def visit_var(self, var):
            return x if var is y else var

    out = ReplaceY().visit(root)
    assert out is not root and out.fields[0] is left and out.fields[1] is x


def test_functor_without_handler_names_the_kind():
    class OnlyVars(ir.ExprFunctor):
        def visit_var(self, var):
            return var.name_hint

    assert OnlyVars().visit(ir.var("q")) == "q"
    with pytest.raises(NotImplementedError, match="Tuple"):
        OnlyVars().visit(ir.Tuple([]))


def _deep_chain(n):
    x = ir.var("x")
    out = x
    for _ in range(n):
        out = pair(out, x)
    return x, out


def _deep_lets(n):
    x = ir.var("x")
    body = x
    bindings = []
    for i in range(n):
        v = ir.var(f"v{i}")
        bindings.append((v, pair(body, x)))
        body = v
    for v, value in reversed(bindings):
        body = ir.Let(v, value, body)
    return body


@pytest.mark.parametrize("build", [_deep_chain, _deep_lets], ids=["call_chain", "let_chain"])
def test_deep_programs_with_default_recursion_limit(build):
    assert sys.getrecursionlimit() <= 3000
    n = 20_000
    built = build(n)
    root = built[1] if isinstance(built, tuple) else built
    visitor = CountingVisitor()
    visitor.visit(root)
    assert visitor.calls == n
    assert ir.ExprMutator().visit(root) is root
    swapped = SwapArgs().visit(root)
    assert swapped is not root
    assert sum(1 for node in ir.iter_post_order(root) if isinstance(node, ir.Call)) == n


def test_visit_let_override_runs_for_every_let_and_sees_its_body():
    x = ir.var("x")
    inner = ir.Let(ir.var("b"), pair(x, x), ir.Tuple([x]))
    outer = ir.Let(ir.var("a"), x, inner)

    class Recorder(ir.ExprVisitor):
        def __init__(self):
            super().__init__()
            self.events = []

        def visit_let(self, let):
            self.events.append(("let", let.var.name_hint))
            super().visit_let(let)

        def visit_tuple(self, tup):
            self.events.append(("tuple",))
            super().visit_tuple(tup)

    r = Recorder()
    r.visit(outer)
    assert r.events == [("let", "a"), ("let", "b"), ("tuple",)]


def test_mutator_let_hooks_can_propagate_and_drop_bindings():
    x = ir.var("x")
    a, b = ir.var("a"), ir.var("b")
    c = ir.const(2.0)
    prog = ir.Let(a, c, ir.Let(b, pair(x, a), b))

    class PropagateConstants(ir.ExprMutator):
        def on_let_binding(self, let, new_var, new_value):
            if isinstance(new_value, ir.Constant):
                self.memo[let.var] = new_value

        def rewrite_let(self, let, new_var, new_value, new_body):
            if isinstance(new_value, ir.Constant):
                return new_body
            return super().rewrite_let(let, new_var, new_value, new_body)

    out = PropagateConstants().visit(prog)
    assert isinstance(out, ir.Let) and out.var is b
    assert out.value.args == (x, c)
