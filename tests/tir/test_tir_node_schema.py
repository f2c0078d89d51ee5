"""Loop-level node schemas: each tir node kind declares its fields once, the rest follows.

The declaration drives children, rebuild, the functors' hooks and defaults, the printer's
operands, structural equality/hash and the flat table (wire) form. These tests check the
derived functions against every built-in kind's declaration, and declare two new kinds
(an expression and a statement) here, in the test only, to show that they are walked,
rewritten, printed, compared, hashed and sent over the wire with no other edit.
"""

from __future__ import annotations

import pytest

from passinfra import ir, tir
from passinfra.errors import IRError
from passinfra.tir import schema
from passinfra.tir.functor import (
    StmtExprMutator,
    StmtExprVisitor,
    any_expr,
    any_stmt,
    expr_children,
    iter_stmts,
    same_expr,
    stmt_children,
    substitute,
)
from passinfra.tir.printer import tir_astext
from passinfra.tir.schema import Role, node_kind, schema_of
from passinfra.tir.structural import canonical_key, flatten_prim_func, tir_structural_equal, unflatten


@node_kind()
class Clamp(tir.PrimExpr):
    """A new expression kind: ``value`` clamped to [lo, hi] (constants, as plain values)."""

    value: tir.PrimExpr = schema.expr()
    lo: float = schema.value(codec=schema.FLOAT_CODEC)
    hi: float = schema.value(codec=schema.FLOAT_CODEC)

    @property
    def dtype(self) -> str:
        return self.value.dtype


@node_kind()
class Prefetch(tir.Stmt):
    """A new statement kind: a hint to fetch ``buffer[indices]``, around a body."""

    buffer: tir.Buffer = schema.buffer()
    indices: tuple[tir.PrimExpr, ...] = schema.expr_seq()
    body: tir.Stmt = schema.stmt()


def _func(lo: float = 0.0, name: str = "i") -> tir.PrimFunc:
    a, b = tir.Buffer("A", (8,), "float32"), tir.Buffer("B", (8,), "float32")
    i = tir.TVar(name)
    store = tir.BufferStore(b, Clamp(a.load(i) * tir.FloatImm(2.0), lo, 6.0), (i,))
    body = tir.For(i, tir.IntImm(0), tir.IntImm(8), tir.ForKind.SERIAL, Prefetch(a, (i + 1,), store))
    return tir.PrimFunc([a, b], body, {"global_symbol": "clamped", "num_inputs": 1})


def test_new_kinds_are_walked_and_their_children_come_from_the_declaration() -> None:
    func = _func()
    prefetch = func.body.body
    assert schema_of(Prefetch).fields[0].role is Role.BUFFER and schema_of(Prefetch).hook == "prefetch"
    assert stmt_children(prefetch) == (prefetch.body,)
    clamp = prefetch.body.value
    assert expr_children(clamp) == (clamp.value,)
    assert [type(s).__name__ for s in iter_stmts(func.body)] == ["For", "Prefetch", "BufferStore"]
    assert any_stmt(func.body, lambda s: isinstance(s, Prefetch))
    assert any_expr(clamp, lambda e: isinstance(e, tir.BufferLoad))

    seen: list[str] = []

    class Names(StmtExprVisitor):
        def visit_clamp(self, node: Clamp) -> None:
            seen.append(f"clamp {node.lo}..{node.hi}")

        def visit_tvar(self, node: tir.TVar) -> None:
            seen.append(node.name)

    Names().visit_stmt(func.body)
    # the generic Prefetch default visits its index (i + 1) before its body: the store's
    # value (the clamp, then the load's index) and then the store's index
    assert seen == ["i", "clamp 0.0..6.0", "i", "i"]


def test_a_mutator_without_expression_hooks_leaves_expressions_unwalked() -> None:
    """No rewrite_<kind> hook and no buffer map: the expression comes back as it is, not
    walked; a hook set on the object (not its class) is still honoured."""
    from passinfra.tir import functor

    expr = _func().body.body.body.value
    walked = []
    real = functor._EXPRS

    class Counting(dict):
        def __missing__(self, kind):
            walked.append(kind)
            return real[kind]

    class Plain(StmtExprMutator):
        pass

    original, functor._EXPRS = functor._EXPRS, Counting()
    try:
        assert Plain().visit_expr(expr) is expr and walked == []
        hooked = Plain()
        hooked.rewrite_clamp = lambda node: Clamp(node.value, node.lo, 2.0)
        assert hooked.visit_expr(expr).hi == 2.0 and walked
    finally:
        functor._EXPRS = original


def test_new_kinds_are_rewritten_by_the_generic_defaults() -> None:
    func = _func()
    bigger = tir.Buffer("A2", (8,), "float32")

    class Rewrite(StmtExprMutator):
        def rewrite_clamp(self, node: Clamp) -> tir.PrimExpr:
            return Clamp(node.value, node.lo, 1.0)

        def map_buffer(self, buffer: tir.Buffer) -> tir.Buffer:
            return bigger if buffer.name == "A" else buffer

    body = Rewrite().visit_stmt(func.body)
    prefetch = body.body
    assert isinstance(prefetch, Prefetch) and prefetch.buffer is bigger
    assert prefetch.body.value.hi == 1.0 and prefetch.body.value.value.a.buffer is bigger
    # nothing to change: the very same objects come back
    assert StmtExprMutator().visit_stmt(func.body) is func.body
    # substitution reaches inside the new kinds, and rebinds their loop's variable
    j = tir.TVar("j")
    moved = substitute(prefetch, {func.body.loop_var: j})
    assert moved.indices[0].a is j and moved.body.value.value.a.indices[0] is j


def test_new_kinds_print_from_their_declaration() -> None:
    text = tir_astext(_func())
    assert "Prefetch(buffer=A, indices=[i + 1]):" in text
    assert "B[i] = Clamp(value=A[i] * 2.0f, lo=0.0, hi=6.0)" in text


def test_new_kinds_compare_hash_and_cross_the_wire() -> None:
    first, renamed, other = _func(), _func(name="k"), _func(lo=-1.0)
    assert tir_structural_equal(first, renamed) and not tir_structural_equal(first, other)
    assert ir.structural_hash(first) == ir.structural_hash(renamed) != ir.structural_hash(other)
    # within one function, same_expr compares the new kind's values and children
    a = first.params[0]
    i = tir.TVar("i")
    assert same_expr(Clamp(a.load(i), 0.0, 1.0), Clamp(a.load(i), 0.0, 1.0))
    assert not same_expr(Clamp(a.load(i), 0.0, 1.0), Clamp(a.load(i), -0.0, 1.0))  # bitwise floats
    # the flat table rebuilds it: the wire format needs no edit either
    flat = flatten_prim_func(first)
    nodes, buffers = unflatten(flat.rows, flat.variables, flat.buffers)
    back = tir.PrimFunc([buffers[p] for p in flat.params], nodes[flat.root], first.attrs)
    assert tir_structural_equal(back, first) and canonical_key(back) == canonical_key(first)
    assert tir_astext(back) == tir_astext(first)


def test_every_builtin_kind_derives_children_and_rebuild_from_its_fields() -> None:
    a = tir.Buffer("A", (4,), "float32")
    i = tir.TVar("i")
    load = a.load(i)
    store = tir.BufferStore(a, load, (i,))
    small = tir.LT(i, tir.IntImm(2))
    samples = {
        tir.IntImm: tir.IntImm(3), tir.FloatImm: tir.FloatImm(1.5), tir.TVar: i,
        tir.Not: tir.Not(small), tir.Select: tir.Select(small, load, load + 1.0),
        tir.Cast: tir.Cast("float64", load), tir.Intrinsic: tir.Intrinsic("exp", (load,), "float32"),
        tir.BufferLoad: load, tir.For: tir.For(i, tir.IntImm(0), tir.IntImm(4), tir.ForKind.SERIAL, store),
        tir.SeqStmt: tir.SeqStmt((store, store)), tir.BufferStore: store,
        tir.Allocate: tir.Allocate(a, store), tir.IfThenElse: tir.IfThenElse(small, store),
        tir.LetStmt: tir.LetStmt(i, tir.IntImm(1), store), tir.Evaluate: tir.Evaluate(load),
    }
    for cls in (tir.Add, tir.Sub, tir.Mul, tir.Div, tir.FloorDiv, tir.FloorMod, tir.Min, tir.Max, tir.EQ,
                tir.NE, tir.LT, tir.LE, tir.GT, tir.GE, tir.And, tir.Or):
        samples[cls] = cls(i, tir.IntImm(1))
    builtin = [cls for cls in schema.node_kinds() if cls.__module__ == "passinfra.tir.nodes"]
    assert sorted(c.__name__ for c in builtin) == sorted(c.__name__ for c in samples)
    for cls, node in samples.items():
        declared = schema_of(cls)
        expected: list = []
        for f in declared.fields:
            item = getattr(node, f.name)
            if f.is_seq:
                expected += item
            elif f.is_child and item is not None:
                expected.append(item)
        assert list(declared.children(node)) == expected, cls.__name__
        copy = declared.rebuild(node, list(declared.children(node)))
        assert type(copy) is cls and copy is not node
        assert canonical_key(copy) == canonical_key(node), cls.__name__


def test_nodes_check_their_fields_when_built() -> None:
    a = tir.Buffer("A", (4,), "float32")
    with pytest.raises(IRError, match=r"Add\.a must be a PrimExpr, got int"):
        tir.Add(1, tir.IntImm(2))
    with pytest.raises(IRError, match=r"SeqStmt\.stmts must be a tuple of Stmts, got list"):
        tir.SeqStmt([tir.Evaluate(tir.IntImm(0))])
    with pytest.raises(IRError, match=r"For\.loop_var must be a TVar"):
        tir.For(tir.IntImm(0), tir.IntImm(0), tir.IntImm(4), tir.ForKind.SERIAL, tir.Evaluate(tir.IntImm(0)))
    with pytest.raises(IRError, match=r"Prefetch\.buffer must be a Buffer, got str"):
        Prefetch("A", (), tir.Evaluate(tir.IntImm(0)))
    with pytest.raises(IRError, match=r"not a loop-level statement: Clamp"):
        StmtExprVisitor().visit_stmt(Clamp(a.load(0), 0.0, 1.0))  # type: ignore[arg-type]
