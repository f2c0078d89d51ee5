"""RemoveUnusedFunctions: reachability from the entry functions."""

from __future__ import annotations

import pytest

from passinfra import ir
from passinfra.ir import op
from passinfra.transform import get_pass
from passinfra.transform.builtin.remove_unused_functions import RemoveUnusedFunctions
from tests.transform.pass_equivalence import property_test


def unary(name: str, body_of) -> ir.Function:
    x = ir.var(f"{name}_x", (2,))
    return ir.Function([x], body_of(x))


def make_module() -> ir.IRModule:
    f, g, h = ir.GlobalVar("f"), ir.GlobalVar("g"), ir.GlobalVar("h")
    return ir.IRModule({
        "f": unary("f", lambda x: ir.Call(g, [x])),
        "g": unary("g", op.exp),
        "h": unary("h", lambda x: ir.Call(h, [x])),  # unreachable, recursive
        "unused": unary("unused", op.negative),
        "value_user": unary("value_user", lambda x: ir.Tuple([x, f])),  # mentions f as a value
        "main": unary("main", lambda x: ir.Call(f, [x])),
    })


def test_keeps_what_main_reaches_in_module_order():
    mod = make_module()
    after = RemoveUnusedFunctions()(mod)
    assert [gv.name_hint for gv in after.functions] == ["f", "g", "main"]
    assert after["f"] is mod["f"]
    assert len(mod) == 6  # the input is untouched


def test_custom_entries_and_value_references():
    after = RemoveUnusedFunctions(entry_functions=["value_user", "missing"])(make_module())
    assert [gv.name_hint for gv in after.functions] == ["f", "g", "value_user"]


def test_registered_with_opt_level_one():
    assert get_pass("RemoveUnusedFunctions").info.opt_level == 1


@pytest.mark.usefixtures("default_recursion_limit")
def test_deep_function_is_scanned_iteratively():
    from passinfra.testing import make_chain

    mod = make_chain(30_000)
    mod["dead"] = unary("dead", op.exp)
    assert [gv.name_hint for gv in RemoveUnusedFunctions()(mod).functions] == ["main"]


test_remove_unused_preserves_semantics = property_test(RemoveUnusedFunctions)
