"""IRModule: keys, order, lookup errors, copies."""

import pytest

from passinfra import ir
from passinfra.errors import IRError


def _fn(name="x"):
    x = ir.var(name, (1,))
    return ir.Function([x], x)


def test_keys_by_name_or_global_var_in_insertion_order():
    mod = ir.IRModule({"main": _fn()})
    mod[ir.GlobalVar("helper")] = _fn()
    mod["a"] = _fn()
    assert [gv.name_hint for gv in mod.functions] == ["main", "helper", "a"]
    assert mod["helper"] is mod[ir.GlobalVar("helper")]
    assert mod.get_global_var("a") == ir.GlobalVar("a")
    assert len(mod) == 3 and "main" in mod and "nope" not in mod


def test_missing_function_error_lists_the_known_ones():
    mod = ir.IRModule({"main": _fn()})
    with pytest.raises(KeyError, match="'nope'.*main"):
        mod["nope"]
    with pytest.raises(KeyError, match="nope"):
        mod.get_global_var("nope")


def test_functions_view_is_read_only_and_copy_is_independent():
    mod = ir.IRModule({"main": _fn()})
    with pytest.raises(TypeError):
        mod.functions[ir.GlobalVar("x")] = _fn()
    other = mod.copy()
    other["extra"] = _fn()
    assert "extra" not in mod and other["main"] is mod["main"]


def test_update_replaces_and_adds():
    mod = ir.IRModule({"main": _fn(), "f": _fn()})
    new_f = _fn("y")
    mod.update(ir.IRModule({"f": new_f, "g": _fn()}))
    assert mod["f"] is new_f and list(mod.functions) == [ir.GlobalVar(n) for n in ("main", "f", "g")]


def test_only_functions_go_in_a_module():
    with pytest.raises(IRError, match="functions"):
        ir.IRModule({"main": ir.var("x")})


def test_from_expr_makes_free_vars_parameters_in_order_of_use():
    a, b = ir.var("a", (1,)), ir.var("b", (1,))
    mod = ir.IRModule.from_expr(ir.Tuple([b, a, b]))
    assert mod["main"].params == (b, a)
    f = _fn()
    assert ir.IRModule.from_expr(f)["main"] is f
