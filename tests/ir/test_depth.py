"""Principle 2 (no recursion limits): 100,000-deep programs under the default limit.

A chain of 100,000 ``add`` calls and a Let chain of 100,000 bindings (built once per
module) must print, parse, hash, pickle, visit, mutate, type-check, verify and evaluate
while Python's recursion limit is 1000.
"""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest

from passinfra import evaluate, ir
from passinfra.testing import make_chain

N = 100_000
X = np.array([0.5, -1.0], dtype="float32")  # (N + 1) * X is exact in float32

pytestmark = pytest.mark.usefixtures("default_recursion_limit")


@pytest.fixture(scope="module", params=["add", "let"])
def kind(request, default_recursion_limit) -> str:
    return request.param


@pytest.fixture(scope="module")
def chain(kind) -> ir.IRModule:
    return make_chain(N, kind)


@pytest.fixture(scope="module")
def chain_text(chain) -> str:
    return chain.astext()


@pytest.fixture(scope="module")
def restored(chain) -> ir.IRModule:
    """The chain after a pickle round trip: a structurally equal, distinct copy."""
    return pickle.loads(pickle.dumps(chain))


def _count(mod: ir.IRModule, node_type: type, op_name: str | None = None) -> int:
    return sum(
        1
        for node in ir.iter_post_order(mod["main"])
        if isinstance(node, node_type) and (op_name is None or node.op.name == op_name)
    )


class AddToSubtract(ir.ExprMutator):
    def visit_call(self, call: ir.Call) -> ir.Expr:
        new = super().visit_call(call)
        if new.op is ir.Op.get("add"):
            return ir.Call(ir.Op.get("subtract"), new.args, new.attrs)
        return new


class NodeCounter(ir.ExprVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.vars = 0

    def visit_call(self, call: ir.Call) -> None:
        self.calls += 1
        super().visit_call(call)

    def visit_var(self, var: ir.Var) -> None:
        self.vars += 1


class LetCounter(ir.ExprVisitor):
    """Overrides visit_let, as a user's analysis of bindings would."""

    def __init__(self) -> None:
        super().__init__()
        self.lets = 0

    def visit_let(self, let: ir.Let) -> None:
        self.lets += 1
        super().visit_let(let)


def test_runs_under_the_default_recursion_limit():
    assert sys.getrecursionlimit() == 1000


def test_prints_deterministically(chain, chain_text):
    assert chain_text.count("add(") == N
    assert chain.astext() == chain_text


def test_parses_back(chain, chain_text):
    ir.assert_structural_equal(ir.parse(chain_text), chain)


def test_pickles_and_unpickles(chain, restored):
    assert restored["main"] is not chain["main"]
    ir.assert_structural_equal(restored, chain)


def test_hashes_like_a_distinct_copy(chain, restored):
    assert ir.structural_hash(restored) == ir.structural_hash(chain)
    assert ir.structural_hash(restored["main"]) == ir.structural_hash(chain["main"])


def test_visitor_sees_every_node_once(chain, kind):
    counter = NodeCounter()
    counter.visit(chain["main"])
    assert counter.calls == N
    # the parameter, plus one bound variable per Let
    assert counter.vars == 1 + (N if kind == "let" else 0)


def test_visitor_overriding_visit_let_sees_every_binding(chain, kind):
    counter = LetCounter()
    counter.visit(chain["main"])
    assert counter.lets == (N if kind == "let" else 0)


def test_identity_mutator_returns_the_same_object(chain):
    main = chain["main"]
    assert ir.ExprMutator().visit(main) is main


def test_rewriting_mutator_rewrites_every_call(chain):
    rewritten = AddToSubtract().visit(chain["main"])
    mod = ir.IRModule({"main": rewritten})
    assert _count(mod, ir.Call, "subtract") == N
    assert _count(mod, ir.Call, "add") == 0
    np.testing.assert_array_equal(evaluate(mod, X), (1 - N) * X)


def test_type_inference(chain):
    assert ir.infer_type(chain) is chain
    assert chain["main"].body.checked_type == ir.TensorType((2,), "float32")


def test_well_formed(chain):
    ir.verify_well_formed(chain)


def test_evaluates(chain):
    np.testing.assert_array_equal(evaluate(chain, X), (N + 1) * X)

