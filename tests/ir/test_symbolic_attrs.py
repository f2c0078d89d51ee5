"""Attributes holding symbolic dims (issue 31): arange, strided_slice with a dim bound,
broadcast_to / full to a dim shape. Their types at random bindings against NumPy, the
interpreter's substitution and run-time checks, and attrs through text, structural
equality/hash and the wire."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import passinfra
from passinfra import ir
from passinfra.errors import EvaluationError, IRTypeError
from passinfra.ir import op
from passinfra.ir.attrs import Attrs
from passinfra.ir.dims import DimVar, evaluate
from passinfra.ir.op import extra
from passinfra.ir.structural import structural_equal, structural_hash

B, S, P = DimVar("batch", 1, 8), DimVar("seq"), DimVar("past", 0, 16)


def _function(body_of, *shapes) -> ir.Function:
    """A function of parameters with ``shapes`` (they bind the dims) returning
    ``body_of(*params)``, its types inferred."""
    params = [ir.Var(f"x{i}", ir.TensorType(shape, "float32")) for i, shape in enumerate(shapes)]
    func = ir.Function(params, body_of(*params))
    return passinfra.transform.InferType()(ir.IRModule({"main": func}))["main"]


def _bound(ty: ir.TensorType, binding: dict[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(d, binding) for d in ty.shape)


def test_types_at_random_bindings_match_numpy():
    # one function of (batch, 40), (past,) and (seq,) holding the ops; every result is
    # exact (ints), so the comparison is exact
    table = np.arange(40, dtype=np.float32).reshape(1, 40)

    def body(x, y, z):
        return ir.Tuple([
            extra.arange(P + S, start=P),
            extra.arange(P + S, start=1, step=3),
            extra.arange(S, start=P + S, step=-2),
            extra.strided_slice(ir.const(table), (1, 40), [1], [0], [S], [1]),
            extra.strided_slice(x, (B, 40), [1], [P], [P + S], [2]),
            extra.broadcast_to(extra.strided_slice(ir.const(table), (1, 40), [1], [1], [S + 1], [1]), [B, S]),
            op.full(np.float32(2.5), [B, S + 1]),
        ])

    func = _function(body, (B, 40), (P,), (S,))
    rng = np.random.default_rng(0)
    for _ in range(12):
        binding = {"batch": int(rng.integers(1, 9)), "seq": int(rng.integers(0, 20)),
                   "past": int(rng.integers(0, 17))}
        b, s, p = binding["batch"], binding["seq"], binding["past"]
        x = rng.standard_normal((b, 40)).astype(np.float32)
        got = passinfra.evaluate(func, x, np.zeros(p, np.float32), np.zeros(s, np.float32))
        want = [np.arange(p, p + s), np.arange(1, p + s, 3), np.arange(p + s, s, -2), table[:, :s],
                x[:, p:p + s:2], np.broadcast_to(table[:, 1:s + 1], (b, s)),
                np.full((b, s + 1), 2.5, np.float32)]
        for value, expected, ty in zip(got, want, func.body.checked_type.fields):
            assert value.shape == _bound(ty, binding) == expected.shape
            np.testing.assert_array_equal(value, expected)


def test_symbolic_lengths_and_what_the_bounds_decide():
    def ret(body, *shapes):
        return _function(body, *shapes).body.checked_type.shape

    assert ret(lambda x: extra.arange(P + S, start=P), (S, P)) == (S,)
    assert ret(lambda x: extra.arange(S + 7, start=1, step=3), (S,)) == (ir.dims.floordiv(S + 8, 3),)
    assert ret(lambda x: extra.arange(S, start=S + 2), (S,)) == (0,)  # provably empty
    # a seq bounded by the buffer's length: the slice's end is proven inside; a longer bound
    # clamps to the buffer (end stored as 40): no run-time assumption either way
    table = ir.const(np.zeros((1, 40), np.float32))
    short, long = DimVar("seq", 1, 40), DimVar("seq", 41, 99)
    assert ret(lambda x: extra.strided_slice(table, (1, 40), [1], [0], [short], [1]), (short,)) == (1, short)
    assert ret(lambda x: extra.strided_slice(table, (1, 40), [1], [0], [long], [1]), (long,)) == (1, 40)
    with pytest.raises(IRTypeError, match=r"the slice \[seq \+ 1:seq\] of size 40 has its end out of order"):
        ret(lambda x: extra.strided_slice(table, (1, 40), [1], [S + 1], [S], [1]), (S,))


def test_run_time_checks_of_what_the_types_assume():
    backwards = _function(lambda x: extra.arange(S, start=P), (S, P))
    with pytest.raises(EvaluationError, match="op arange: the range from 3 to 2 by 1.*runs backwards"):
        passinfra.evaluate(backwards, np.zeros((2, 3), np.float32))
    table = ir.const(np.zeros((1, 40), np.float32))
    beyond = _function(lambda x: extra.strided_slice(table, (1, 40), [1], [0], [S], [1]), (S,))
    with pytest.raises(EvaluationError, match=r"axis 1: the slice \[0:41\].*size 40 breaks 0 <= begin"):
        passinfra.evaluate(beyond, np.zeros(41, np.float32))
    # a dim no parameter binds has no size: named, not a crash inside NumPy
    free = ir.Function([], extra.arange(S))
    with pytest.raises(EvaluationError, match="op arange: .*no value for the dimension seq"):
        passinfra.evaluate(free)
    # an op that did not opt in sees no dim in its attrs
    with pytest.raises(IRTypeError, match=r"op tile: attribute reps holds a symbolic dimension \(\(dim\(seq"):
        _function(lambda x: ir.Call(ir.Op.get("tile"), [ir.const(np.zeros(2))], {"reps": (S, 1)}), (S,))


def test_attrs_with_dims_round_trip_and_compare_structurally():
    attrs = Attrs(end=(S + P,), start=P)
    assert attrs.has_dims and not Attrs(end=(3,)).has_dims
    assert attrs == Attrs(start=P, end=(P + S,)) and hash(attrs) == hash(Attrs(start=P, end=(P + S,)))
    assert attrs != Attrs(start=P, end=(S,))
    assert pickle.loads(pickle.dumps(attrs)) == attrs

    def build(past, seq):
        return _function(lambda x, y: extra.arange(past + seq, start=past), (seq, 4), (past,))

    mod = ir.IRModule({"main": build(P, S)})
    text = mod.astext()
    assert 'arange(start=dim(past), stop=dim(past + seq), step=1, dtype="int64")' in text
    assert text.startswith("def @main[past: 0..16, seq](")
    for back in (ir.parse(text), pickle.loads(pickle.dumps(mod))):
        assert structural_equal(back, mod) and structural_hash(back) == structural_hash(mod)
        assert back.astext() == text
    # dims bound at the parameters are variables: renamed, the functions are equal...
    renamed = build(DimVar("p", 0, 16), DimVar("n"))
    assert structural_equal(renamed, mod["main"]) and structural_hash(renamed) == structural_hash(mod["main"])
    # ...but an attr naming another dim is another function
    other = _function(lambda x, y: extra.arange(P + S, start=S), (S, 4), (P,))
    assert not structural_equal(other, mod["main"]) and structural_hash(other) != structural_hash(mod["main"])
