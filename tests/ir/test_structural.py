"""Structural equality and hashing: per node kind, alpha-equivalence, free variables,
sharing, modules, messages, determinism across processes, and 100,000-deep programs."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

from passinfra import ir
from passinfra.ir import op
from passinfra.ir.structural import StructuralMismatchError
from passinfra.testing import make_chain
from tests.strategies import GEN_SETTINGS, programs

ROOT = Path(__file__).resolve().parents[2]


def t(shape=(2, 3), dtype="float32") -> ir.TensorType:
    return ir.TensorType(shape, dtype)


def text(node) -> str:
    try:
        return str(node)
    except NotImplementedError:
        return repr(node)


# --------------------------------------------------------------------------- builders:
# each call builds a fresh copy with new Var objects, so two calls are alpha-equivalent


def build_binary() -> ir.Expr:
    x, y = ir.var("x", (2, 3)), ir.var("y", (2, 3))
    return ir.Function([x, y], op.add(x, op.multiply(y, ir.const(2.0))))


def build_conv() -> ir.Expr:
    data, weight = ir.var("data", (1, 3, 8, 8)), ir.var("weight", (4, 3, 3, 3))
    return ir.Function([data, weight], op.nn.relu(op.nn.conv2d(data, weight, padding=(1, 1))))


def build_tuple() -> ir.Expr:
    x = ir.var("x", (2,))
    return ir.Function([x], ir.TupleGetItem(ir.Tuple([x, op.exp(x)]), 1))


def build_let() -> ir.Expr:
    x = ir.var("x", (2,))
    a, b = ir.Var("a"), ir.Var("b", t((2,)))
    return ir.Function([x], ir.Let(a, op.add(x, x), ir.Let(b, op.negative(a), op.multiply(a, b))))


def build_if() -> ir.Expr:
    c, x = ir.var("c", (), "bool"), ir.var("x", (2,))
    return ir.Function([c, x], ir.If(c, op.exp(x), op.log(x)), ret_type=t((2,)))


def build_closure() -> ir.Expr:
    x = ir.var("x", (2,))
    y = ir.var("y", (2,))
    inner = ir.Function([y], op.add(x, y)).with_attr("Closure", 1)
    return ir.Function([x], ir.Call(inner, [x]))


def build_global_call() -> ir.Expr:
    x = ir.var("x", (2,))
    return ir.Function([x], ir.Call(ir.GlobalVar("helper"), [x, ir.const(np.array([1, 2], "int32"))]))


BUILDERS: dict[str, Callable[[], ir.Expr]] = {
    "binary": build_binary,
    "conv": build_conv,
    "tuple": build_tuple,
    "let": build_let,
    "if": build_if,
    "closure": build_closure,
    "global_call": build_global_call,
}


@pytest.mark.parametrize("name", BUILDERS)
def test_fresh_copies_are_equal_and_hash_equal(name):
    a, b = BUILDERS[name](), BUILDERS[name]()
    assert a is not b
    assert ir.structural_equal(a, b)
    ir.assert_structural_equal(a, b)
    assert ir.structural_hash(a) == ir.structural_hash(b)


def test_different_builders_are_unequal_and_hash_differently():
    built = {name: builder() for name, builder in BUILDERS.items()}
    hashes = {name: ir.structural_hash(e) for name, e in built.items()}
    assert len(set(hashes.values())) == len(hashes)
    for name_a, a in built.items():
        for name_b, b in built.items():
            assert ir.structural_equal(a, b) == (name_a == name_b)


# --------------------------------------------------------------------------- inequality


def _pair(make: Callable[[bool], ir.Expr]) -> tuple[ir.Expr, ir.Expr]:
    return make(False), make(True)


UNEQUAL: dict[str, Callable[[bool], ir.Expr]] = {
    "op": lambda v: (op.multiply if v else op.add)(ir.var("x", (2,)), ir.const(1.0)),
    "call attrs": lambda v: op.nn.softmax(ir.var("x", (2, 3)), axis=0 if v else -1),
    "conv padding": lambda v: op.nn.conv2d(
        ir.var("d", (1, 1, 4, 4)), ir.var("w", (1, 1, 3, 3)), padding=(1, 1) if v else (0, 0)
    ),
    "constant value": lambda v: ir.const(np.array([1.0, 2.0 if v else 3.0], "float32")),
    "constant shape": lambda v: ir.const(np.zeros((2, 1) if v else (1, 2), "float32")),
    "constant dtype": lambda v: ir.const(np.zeros(2, "float64" if v else "float32")),
    "signed zero": lambda v: ir.const(-0.0 if v else 0.0),
    "tuple arity": lambda v: ir.Tuple([ir.const(1.0)] * (3 if v else 2)),
    "tuple index": lambda v: ir.TupleGetItem(ir.Tuple([ir.const(1.0), ir.const(1.0)]), 1 if v else 0),
    "global var": lambda v: ir.GlobalVar("g" if v else "f"),
    "var annotation": lambda v: (lambda x: ir.Function([x], x))(ir.var("x", (3,) if v else (2,))),
    "unannotated var": lambda v: (lambda x: ir.Function([x], x))(ir.Var("x", t() if v else None)),
    "ret_type": lambda v: (lambda x: ir.Function([x], x, ret_type=t((2,)) if v else None))(ir.var("x", (2,))),
    "function attrs": lambda v: (lambda x: ir.Function([x], x, attrs={"Primitive": 1 if v else 0}))(
        ir.var("x", (2,))
    ),
    "int vs bool attr": lambda v: (lambda x: ir.Function([x], x, attrs={"Primitive": True if v else 1}))(
        ir.var("x", (2,))
    ),
    "node kind": lambda v: ir.Tuple([ir.const(1.0)]) if v else op.exp(ir.const(1.0)),
    "if branch": lambda v: ir.If(ir.const(True), ir.const(1.0), ir.const(2.0 if v else 3.0)),
    "param count": lambda v: ir.Function([ir.var("x", (2,)) for _ in range(2 if v else 1)], ir.const(1.0)),
}


@pytest.mark.parametrize("name", UNEQUAL)
def test_unequal(name):
    a, b = _pair(UNEQUAL[name])
    assert not ir.structural_equal(a, b)
    assert not ir.structural_equal(b, a)
    assert ir.structural_hash(a) != ir.structural_hash(b)
    with pytest.raises(AssertionError):
        ir.assert_structural_equal(a, b)


def test_nan_constants_compare_bitwise():
    nan = np.array([np.nan, 1.0], "float32")
    assert ir.structural_equal(ir.const(nan), ir.const(nan.copy()))
    assert ir.structural_hash(ir.const(nan)) == ir.structural_hash(ir.const(nan.copy()))
    other_nan = nan.view("uint32").copy()
    other_nan[0] ^= 1  # another NaN payload: a different constant
    assert not ir.structural_equal(ir.const(nan), ir.const(other_nan.view("float32")))


def test_large_constants_and_empty_constants():
    big = np.arange(100_000, dtype="float32")
    changed = big.copy()
    changed[-1] = -1
    assert ir.structural_equal(ir.const(big), ir.const(big.copy()))
    assert not ir.structural_equal(ir.const(big), ir.const(changed))
    empty = np.zeros((0, 3), "float32")
    assert ir.structural_equal(ir.const(empty), ir.const(empty.copy()))
    assert ir.structural_hash(ir.const(empty)) == ir.structural_hash(ir.const(empty.copy()))


# --------------------------------------------------------------------------- variables


def test_alpha_equivalence_ignores_names_but_not_positions():
    def subtract(first: str, second: str, swap: bool) -> ir.Function:
        p, q = ir.var(first, (2,)), ir.var(second, (2,))
        return ir.Function([p, q], op.subtract(q, p) if swap else op.subtract(p, q))

    assert ir.structural_equal(subtract("x", "y", False), subtract("a", "b", False))
    assert not ir.structural_equal(subtract("x", "y", False), subtract("x", "y", True))


def test_bound_vars_must_pair_one_to_one():
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    a = ir.var("a", (2,))
    distinct = ir.Function([x, y], op.add(x, y))
    repeated = ir.Function([a, a], op.add(a, a))
    assert not ir.structural_equal(distinct, repeated)
    assert not ir.structural_equal(repeated, distinct)


def test_let_bound_var_is_not_a_free_var():
    x = ir.var("x", (2,))
    bound = ir.Var("v")
    free = ir.Var("v")
    a = ir.Function([x], ir.Let(bound, x, bound))
    b = ir.Function([x], ir.Let(ir.Var("w"), x, free))
    assert not ir.structural_equal(a, b, map_free_vars=True)


def test_free_vars_equal_only_to_themselves_unless_mapped():
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    assert ir.structural_equal(op.add(x, x), op.add(x, x))
    assert not ir.structural_equal(op.add(x, x), op.add(y, y))
    assert ir.structural_equal(op.add(x, x), op.add(y, y), map_free_vars=True)
    # mapped free vars still form a bijection
    assert not ir.structural_equal(op.add(x, x), op.add(x, y), map_free_vars=True)
    assert not ir.structural_equal(op.add(x, y), op.add(x, x), map_free_vars=True)
    # the hash does not depend on the flag, and agrees with the mapped equality
    assert ir.structural_hash(op.add(x, x)) == ir.structural_hash(op.add(y, y))
    assert ir.structural_hash(op.add(x, x), map_free_vars=True) == ir.structural_hash(op.add(x, x))


def test_free_var_annotations_compared_when_mapped():
    assert not ir.structural_equal(ir.var("x", (2,)), ir.var("x", (3,)), map_free_vars=True)
    assert ir.structural_equal(ir.var("x", (2,)), ir.var("z", (2,)), map_free_vars=True)


# --------------------------------------------------------------------------- sharing


def diamond_ladder(levels: int) -> ir.Function:
    """Each level uses the previous one twice: 2**levels paths, ``3 * levels`` nodes."""
    x = ir.var("x", (2,))
    current: ir.Expr = x
    for _ in range(levels):
        current = op.add(op.exp(current), op.negative(current))
    return ir.Function([x], current)


def test_sharing_is_linear_not_exponential():
    a, b = diamond_ladder(60), diamond_ladder(60)
    assert ir.structural_equal(a, b)
    assert ir.structural_hash(a) == ir.structural_hash(b)
    x = ir.var("x", (2,))
    different_bottom = op.add(op.exp(op.sqrt(x)), op.negative(x))
    deeper = ir.Function([x], different_bottom)
    assert not ir.structural_equal(diamond_ladder(1), deeper)


def test_dag_equals_tree_of_copies():
    x = ir.var("x", (2,))
    shared = op.exp(x)
    dag = ir.Function([x], op.add(shared, shared))
    y = ir.var("y", (2,))
    tree = ir.Function([y], op.add(op.exp(y), op.exp(y)))
    assert ir.structural_equal(dag, tree)
    assert ir.structural_equal(tree, dag)
    assert ir.structural_hash(dag) == ir.structural_hash(tree)


def test_shared_function_literal_binds_the_same_vars_twice():
    # the documented exception: a shared binder is not the same as two binders
    def literal() -> ir.Function:
        p = ir.var("p", (2,))
        return ir.Function([p], op.exp(p))

    shared = literal()
    dag = ir.Tuple([shared, shared])
    assert ir.structural_equal(dag, ir.Tuple([literal()] * 2))
    assert not ir.structural_equal(dag, ir.Tuple([literal(), literal()]))


# --------------------------------------------------------------------------- modules, types, attrs


def _module(order: list[str], scale: float = 2.0) -> ir.IRModule:
    functions = {}
    for name in order:
        x = ir.var("x", (2,))
        functions[name] = ir.Function([x], op.multiply(x, ir.const(scale)))
    return ir.IRModule(functions)


def test_modules_compare_by_function_name_not_order():
    a, b = _module(["main", "f", "g"]), _module(["g", "main", "f"])
    assert ir.structural_equal(a, b)
    assert ir.structural_hash(a) == ir.structural_hash(b)
    assert not ir.structural_equal(a, _module(["main", "f"]))
    assert not ir.structural_equal(a, _module(["main", "f", "g"], scale=3.0))
    assert ir.structural_hash(a) != ir.structural_hash(_module(["main", "f", "g"], scale=3.0))
    assert not ir.structural_equal(a, a.with_attr("version", 1))
    assert ir.structural_hash(a) != ir.structural_hash(a.with_attr("version", 1))
    assert not ir.structural_equal(a, a["main"])


def test_types_attrs_and_lists():
    assert ir.structural_equal(t(), t())
    assert not ir.structural_equal(t(), t((3, 2)))
    assert ir.structural_hash(ir.FuncType([t()], ir.TupleType([t(), t((1,))]))) == ir.structural_hash(
        ir.FuncType([t()], ir.TupleType([t(), t((1,))]))
    )
    assert ir.structural_equal(ir.Attrs(a=1, b=(1, 2)), ir.Attrs(b=(1, 2), a=1))
    assert ir.structural_hash(ir.Attrs(a=1, b=2.0)) == ir.structural_hash(ir.Attrs(b=2.0, a=1))
    assert not ir.structural_equal(ir.Attrs(a=1), ir.Attrs(a=1.0))
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    assert ir.structural_equal([op.exp(x), x], [op.exp(y), y], map_free_vars=True)
    assert not ir.structural_equal([op.exp(x), x], [op.exp(y), x], map_free_vars=True)


def test_hash_is_cached_on_the_root_and_on_constants():
    func = build_binary()
    assert func._shash is None
    value = ir.structural_hash(func)
    assert func._shash == value
    assert ir.structural_hash(func) == value
    constant = func.body.args[1].args[1]
    assert isinstance(constant, ir.Constant) and constant._shash is not None
    assert ir.structural_hash(constant) == constant._shash
    assert 0 <= value < 2**64


# --------------------------------------------------------------------------- messages


def test_assert_message_names_path_kind_and_both_sides():
    def build(inner) -> ir.IRModule:
        x, y = ir.var("x", (2,)), ir.var("y", (2,))
        return ir.IRModule({"main": ir.Function([x, y], op.add(x, op.multiply(inner(x, y), y)))})

    lhs, rhs = build(op.add), build(op.multiply)
    with pytest.raises(StructuralMismatchError) as info:
        ir.assert_structural_equal(lhs, rhs)
    message = str(info.value)
    assert "main.body.args[1].args[0]" in message
    assert "different op: 'add' vs 'multiply'" in message
    assert text(lhs["main"].body.args[1].args[0]) in message
    assert text(rhs["main"].body.args[1].args[0]) in message
    assert isinstance(info.value, AssertionError)


def test_assert_message_for_constants_and_free_vars():
    with pytest.raises(AssertionError, match=r"root\.args\[1\]: different constant values: first difference"):
        x = ir.var("x", (3,))
        lhs = op.add(x, ir.const(np.array([1, 2, 3], "float32")))
        ir.assert_structural_equal(lhs, op.add(x, ir.const(np.array([1, 2, 4], "float32"))))
    with pytest.raises(AssertionError, match=r"root\.args\[0\]: unequal free variables x vs y") as info:
        ir.assert_structural_equal(op.exp(ir.var("x", (2,))), op.exp(ir.var("y", (2,))))
    assert "in lhs root" in str(info.value)  # the enclosing call is shown for a leaf
    with pytest.raises(AssertionError, match=r"different constant shape: \(2,\) vs \(3,\)"):
        ir.assert_structural_equal(ir.const(np.zeros(2, "float32")), ir.const(np.zeros(3, "float32")))
    with pytest.raises(AssertionError, match="only in lhs \\['g'\\]"):
        ir.assert_structural_equal(_module(["main", "g"]), _module(["main"]))


# --------------------------------------------------------------------------- determinism


HASH_PROGRAM = """
import numpy as np
from passinfra import ir
from passinfra.ir import op
x = ir.var("x", (1, 3, 8, 8))
w = ir.const(np.arange(108, dtype="float32").reshape(4, 3, 3, 3))
v = ir.Var("v")
body = ir.Let(v, op.nn.conv2d(x, w, padding=(1, 1)), ir.Tuple([op.nn.relu(v), ir.const(1.5)]))
mod = ir.IRModule({"main": ir.Function([x], body).with_attr("Name", "net")})
print(ir.structural_hash(mod), ir.structural_hash(mod["main"]), ir.structural_hash(ir.Attrs(k="s", f=0.5)))
"""


def test_hash_is_the_same_in_every_process():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    outputs = set()
    for seed in ("1", "12345"):
        env["PYTHONHASHSEED"] = seed
        result = subprocess.run(
            [sys.executable, "-c", HASH_PROGRAM],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, result.stderr
        outputs.add(result.stdout.strip())
    assert len(outputs) == 1
    scope: dict = {}
    from contextlib import redirect_stdout
    from io import StringIO

    captured = StringIO()
    with redirect_stdout(captured):
        exec(HASH_PROGRAM, scope)
    assert captured.getvalue().strip() in outputs


# --------------------------------------------------------------------------- properties


class AlphaRename(ir.ExprMutator):
    """Gives every variable a fresh object and name."""

    def visit_var(self, var: ir.Var) -> ir.Expr:
        return ir.Var(var.name_hint + "_renamed", var.type_annotation)


@GEN_SETTINGS
@given(programs(max_nodes=25))
def test_alpha_renamed_and_pickled_programs_are_equal(mod):
    renamed = ir.IRModule({gv: AlphaRename().visit(func) for gv, func in mod.functions.items()})
    assert ir.structural_equal(mod, renamed)
    assert ir.structural_hash(mod) == ir.structural_hash(renamed)
    copied = pickle.loads(pickle.dumps(mod))
    ir.assert_structural_equal(mod, copied)
    assert ir.structural_hash(copied) == ir.structural_hash(mod)


# --------------------------------------------------------------------------- depth


@pytest.mark.usefixtures("default_recursion_limit")
@pytest.mark.parametrize("kind", ["add", "let"])
def test_hundred_thousand_deep_programs(kind):
    a, b = make_chain(100_000, kind)["main"], make_chain(100_000, kind)["main"]
    assert sys.getrecursionlimit() == 1000
    assert ir.structural_equal(a, b)
    assert ir.structural_hash(a) == ir.structural_hash(b)
    # one level less: for the add chain the difference is found at the very bottom
    shorter = ir.Function(b.params, b.body.args[0] if kind == "add" else b.body.body)
    assert not ir.structural_equal(a, shorter)
    with pytest.raises(AssertionError):
        ir.assert_structural_equal(a, shorter)
