"""Built-in passes with options keep them as fields: ``repr`` shows them, equal
configurations compare equal, pickling keeps them, ``info``/``reads_module`` follow from
them, and the registry rebuilds a pass from its name and options."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from passinfra import ir
from passinfra.ir import op
from passinfra.transform import (
    DeadCodeElimination,
    EliminateCommonSubexpr,
    FoldConstant,
    FunctionPass,
    FuseOps,
    ModulePass,
    PassInfo,
    PrintIR,
    RemoveUnusedFunctions,
    ToGraphNormalForm,
    get_pass,
    list_passes,
)
from passinfra.transform.errors import PassArgumentError
from passinfra.transform.pass_options import configured_pass, pass_options

CONFIGURED = [
    (FoldConstant(interprocedural=True), "FoldConstant(interprocedural=True)"),
    (FuseOps(fuse_opt_level=1), "FuseOps(fuse_opt_level=1)"),
    (DeadCodeElimination(inline_once=True), "DeadCodeElimination(inline_once=True, interprocedural=False)"),
    (EliminateCommonSubexpr(interprocedural=True), "EliminateCommonSubexpr(interprocedural=True)"),
    (ToGraphNormalForm(interprocedural=True), "ToGraphNormalForm(interprocedural=True)"),
    (RemoveUnusedFunctions(["main", "aux"]), "RemoveUnusedFunctions(entry_functions=('main', 'aux'))"),
    (PrintIR("after fusion"), "PrintIR(header='after fusion', show_meta_data=False)"),
]


@pytest.mark.parametrize("made, text", CONFIGURED, ids=[text for _, text in CONFIGURED])
def test_repr_shows_the_options(made, text):
    assert repr(made) == text


@pytest.mark.parametrize("made, text", CONFIGURED, ids=[text for _, text in CONFIGURED])
def test_pickling_keeps_options_info_and_promise(made, text):
    copy = pickle.loads(pickle.dumps(made))
    assert copy == made and copy is not made
    assert repr(copy) == text
    assert copy.info == made.info
    assert getattr(copy, "reads_module", None) == getattr(made, "reads_module", None)


def test_equal_configurations_compare_and_hash_equal():
    assert FoldConstant(interprocedural=True) == FoldConstant(True)
    assert hash(FoldConstant(interprocedural=True)) == hash(FoldConstant(True))
    assert FoldConstant() != FoldConstant(interprocedural=True)
    assert DeadCodeElimination(True) == DeadCodeElimination(inline_once=True, interprocedural=False)
    assert DeadCodeElimination(inline_once=True) != DeadCodeElimination(interprocedural=True)
    assert FuseOps() == FuseOps(-1) != FuseOps(0)
    # one name or any iterable of names: the same configuration
    assert RemoveUnusedFunctions("main") == RemoveUnusedFunctions(["main"]) == RemoveUnusedFunctions()
    assert hash(RemoveUnusedFunctions("main")) == hash(RemoveUnusedFunctions(("main",)))
    # the same option values on another pass are another pass
    assert EliminateCommonSubexpr(True) != ToGraphNormalForm(True)
    assert len({FoldConstant(), FoldConstant(), FoldConstant(True)}) == 2


def test_options_cannot_change_after_construction():
    made = FoldConstant()
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.interprocedural = True  # type: ignore[misc]
    assert made.reads_module is False


def test_info_and_reads_module_follow_from_the_options():
    for make, info in (
        (FoldConstant, PassInfo(2, "FoldConstant")),
        (EliminateCommonSubexpr, PassInfo(3, "EliminateCommonSubexpr")),
        (ToGraphNormalForm, PassInfo(1, "ToGraphNormalForm")),
        (DeadCodeElimination, PassInfo(1, "DeadCodeElimination")),
    ):
        for interprocedural in (False, True):
            made = make(interprocedural=interprocedural)
            assert isinstance(made, FunctionPass)
            assert made.info == info and made.name == info.name
            assert made.reads_module is interprocedural
    assert DeadCodeElimination(inline_once=True).reads_module is False
    assert FuseOps(2).info == PassInfo(0, "FuseOps", ("InferType",))
    assert isinstance(FuseOps(2), ModulePass)
    assert RemoveUnusedFunctions("f").info == PassInfo(1, "RemoveUnusedFunctions")
    assert PrintIR("x").info == PassInfo(0, "PrintIR")


def test_registry_makes_the_default_configuration():
    for make in (FoldConstant, FuseOps, DeadCodeElimination, EliminateCommonSubexpr, ToGraphNormalForm,
                 RemoveUnusedFunctions, PrintIR):
        name = make.__name__
        assert get_pass(name) == make()
        assert get_pass(name) is not get_pass(name)


def test_every_registered_pass_rebuilds_from_its_name_and_options():
    # the registry and the pass classes agree: what pass_options reads, the factory takes
    with_options = []
    for name in list_passes():
        options = pass_options(get_pass(name))
        if options:
            with_options.append(name)
            assert configured_pass(name, options) == get_pass(name), name
    assert {"FoldConstant", "FuseOps", "DeadCodeElimination", "EliminateCommonSubexpr", "ToGraphNormalForm",
            "RemoveUnusedFunctions", "PrintIR"} <= set(with_options)
    assert pass_options(FoldConstant(True)) == {"interprocedural": True}
    assert pass_options(DeadCodeElimination(True)) == {"inline_once": True, "interprocedural": False}
    assert configured_pass("FoldConstant", {"interprocedural": True}) == FoldConstant(interprocedural=True)
    assert pass_options(get_pass("InferType")) == {}


def test_unknown_options_are_named():
    with pytest.raises(PassArgumentError, match="'FoldConstant'.*'inline_once'"):
        configured_pass("FoldConstant", {"inline_once": True})


def test_an_unpickled_pass_runs_with_its_options():
    x, a, b = ir.var("x", (2,)), ir.Var("a"), ir.Var("b")
    func = ir.Function([x], ir.Let(a, op.exp(x), ir.Let(b, op.negative(x), op.add(op.add(a, b), b))))
    mod = ir.IRModule({"main": func})
    inline = pickle.loads(pickle.dumps(DeadCodeElimination(inline_once=True)))
    expected = ir.Function([x], ir.Let(b, op.negative(x), op.add(op.add(op.exp(x), b), b)))
    ir.assert_structural_equal(inline(mod)["main"], expected)
    assert pickle.loads(pickle.dumps(DeadCodeElimination()))(mod)["main"] is func
