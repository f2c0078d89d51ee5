"""The loop IR's package conventions: identity ``==``/``hash`` like the graph IR, structure
through functions, text through the printer, and a package whose modules import only
the modules below them."""

from __future__ import annotations

import ast
import pathlib

from passinfra import ir, tir
from passinfra.tir.functor import same_expr
from passinfra.tir.printer import tir_astext
from passinfra.tir.structural import tir_structural_equal

# the package's layering, bottom first: a module may import only modules before it
LAYERS = ["schema", "nodes", "functor", "sizes", "printer", "structural", "arith", "intrinsics", "evaluator",
          "verify"]


def _sample() -> tir.PrimFunc:
    a, b = tir.Buffer("A", (4,), "float32"), tir.Buffer("B", (4,), "float32")
    i = tir.TVar("i")
    store = tir.BufferStore(b, a.load(i) + tir.FloatImm(1.0), (i,))
    return tir.PrimFunc([a, b], tir.For(i, tir.IntImm(0), tir.IntImm(4), tir.ForKind.SERIAL, store),
                        {"global_symbol": "k", "num_inputs": 1})


def test_equality_is_identity_and_structure_goes_through_functions() -> None:
    one, other = tir.IntImm(1), tir.IntImm(1)
    assert one == one and one != other and hash(one) == hash(one)
    assert len({one, other}) == 2
    assert same_expr(one, other) and not same_expr(one, tir.IntImm(2))
    first, second = _sample(), _sample()
    assert first.body != second.body
    assert tir_structural_equal(first.body, second.body) and tir_structural_equal(first, second)
    assert ir.structural_equal(first, second)  # PrimFunc is registered with the graph IR's rule


def test_hash_and_eq_of_a_deep_expression_do_not_recurse() -> None:
    expr: tir.PrimExpr = tir.IntImm(0)
    for step in range(100_000):
        expr = tir.Add(tir.IntImm(step), expr)
    assert expr == expr and isinstance(hash(expr), int)


def test_prim_func_text_comes_from_the_printer() -> None:
    func = _sample()
    assert func.astext() == tir_astext(func) == str(func)
    assert "@prim_func" in func.astext()
    module_text = "\n".join(line[3:] for line in ir.IRModule({"k": func}).astext().splitlines())
    assert tir_astext(func).rstrip("\n") in module_text


def test_modules_import_only_modules_below_them() -> None:
    root = pathlib.Path(tir.__file__).parent
    assert sorted(p.stem for p in root.glob("*.py") if p.stem != "__init__") == sorted(LAYERS)
    for position, name in enumerate(LAYERS):
        tree = ast.parse((root / f"{name}.py").read_text())
        # module-level imports only: PrimFunc.astext imports the printer inside the method
        imported = {node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
        inside = {module.split(".")[2] for module in imported if module.startswith("passinfra.tir.")}
        assert inside <= set(LAYERS[:position]), f"{name} imports {sorted(inside - set(LAYERS[:position]))}"
        assert not any(module.startswith("passinfra.codegen") for module in imported), name
