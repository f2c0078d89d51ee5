"""The pass manager, modelled on TVM's tests/python/relay/test_pass_manager.py."""

from __future__ import annotations

import pytest
from pass_testlib import (
    ADD,
    MUL,
    add,
    add_to_mul_func,
    fingerprint,
    log,
    make_add_abs_function,
    make_add_to_mul,
    make_module,
    make_tracer,
    op_names,
)

from passinfra import ir
from passinfra.instrument import PassTimingInstrument, pass_instrument
from passinfra.transform import (
    FunctionPass,
    FunctionSetChangedError,
    ModulePass,
    Pass,
    PassArgumentError,
    PassContext,
    PassInfo,
    PassReturnTypeError,
    Sequential,
    function_pass,
    module_pass,
)

# ----- PassInfo ---------------------------------------------------------------------


def test_pass_info():
    info = PassInfo(1, "xyz")
    assert (info.opt_level, info.name, info.required) == (1, "xyz", ())
    info = PassInfo(3, "abc", ["InferType", "FoldConstant"])
    assert info.required == ("InferType", "FoldConstant")
    assert info == PassInfo(3, "abc", ("InferType", "FoldConstant"))
    assert "abc" in repr(info) and "opt_level=3" in repr(info)
    with pytest.raises(AttributeError):
        info.name = "other"


@pytest.mark.parametrize(
    "args, message",
    [(("1", "p"), "opt_level must be an int"), ((1, ""), "name must be a non-empty string"),
     ((1, "p", "InferType"), "required passes of 'p'")],
)
def test_pass_info_rejects_bad_fields(args, message):
    with pytest.raises(PassArgumentError, match=message):
        PassInfo(*args)


def test_pass_info_declares_type_inference_by_keyword_only():
    """``infers_types`` is what a scheduler reads to treat a pass as type inference (never
    the name): off unless declared, part of equality, shown where declared, kept by pickle."""
    import pickle

    from passinfra.transform import InferType

    plain = PassInfo(0, "CacheTypes", ["A"])
    declared = PassInfo(0, "CacheTypes", ["A"], infers_types=True)
    assert not plain.infers_types and declared.infers_types
    assert plain != declared and hash(plain) != hash(declared)
    assert repr(plain) == "PassInfo(opt_level=0, name='CacheTypes', required=['A'])"
    assert repr(declared) == "PassInfo(opt_level=0, name='CacheTypes', required=['A'], infers_types=True)"
    for info in (plain, declared):
        assert pickle.loads(pickle.dumps(info)) == info
    with pytest.raises(TypeError):
        PassInfo(0, "CacheTypes", (), True)  # keyword only: the positional signature is contract
    with pytest.raises(PassArgumentError, match="infers_types must be a bool"):
        PassInfo(0, "CacheTypes", infers_types=1)
    assert InferType().info == PassInfo(0, "InferType", infers_types=True)
    made = module_pass(lambda mod, ctx: mod, opt_level=0, name="CacheTypes", infers_types=True)
    assert made.info == PassInfo(0, "CacheTypes", infers_types=True)
    assert not module_pass(lambda mod, ctx: mod, opt_level=0, name="Other").info.infers_types


# ----- module passes ------------------------------------------------------------------


def test_module_pass():
    mod = make_module()
    before = fingerprint(mod)
    mod_pass = make_add_abs_function(opt_level=0, name="module_pass_test")
    assert isinstance(mod_pass, ModulePass)
    assert mod_pass.info.name == "module_pass_test" and mod_pass.info.opt_level == 0

    updated = mod_pass(mod)
    assert isinstance(updated, ir.IRModule)
    assert [gv.name_hint for gv in updated.functions] == ["myAdd", "myLog", "myAbs"]
    assert op_names(updated["myAbs"]) == ["test_pass.log"]
    assert updated["myAdd"] is mod["myAdd"]  # untouched functions are shared
    assert fingerprint(mod) == before  # the pass updated its own copy, not the input


def test_module_pass_returning_non_module_names_the_pass():
    bad = module_pass(lambda mod, ctx: None, opt_level=0, name="ReturnsNothing")
    with pytest.raises(PassReturnTypeError, match="'ReturnsNothing' returned NoneType"):
        bad(make_module())


def test_pass_rejects_non_module_input():
    with pytest.raises(PassArgumentError, match="'AddToMul' expects an IRModule, got Function"):
        make_add_to_mul()(make_module()["myAdd"])


def test_module_class_pass():
    @module_pass(opt_level=1, name="TestPipeline")
    class TestPipeline:
        """A class module pass adding one function."""

        def __init__(self, new_name, counter):
            self.new_name = new_name
            self.counter = counter

        def transform_module(self, mod, ctx):
            self.counter.append(ctx.opt_level)
            x = ir.var("x", (2,))
            mod[self.new_name] = ir.Function([x], log(x))
            return mod

    assert TestPipeline.__name__ == "TestPipeline"
    assert TestPipeline.__doc__ == "A class module pass adding one function."
    calls: list[int] = []
    pipeline = TestPipeline("added", calls)
    assert isinstance(pipeline, ModulePass) and isinstance(pipeline, TestPipeline)
    assert pipeline.info == PassInfo(1, "TestPipeline")
    assert pipeline.new_name == "added"  # falls through to the wrapped instance
    with PassContext(opt_level=3):
        result = pipeline(make_module())
    assert "added" in result and calls == [3]
    with pytest.raises(AttributeError):
        pipeline.no_such_attribute  # noqa: B018


# ----- function passes ------------------------------------------------------------------


def test_function_pass():
    mod = make_module()
    before = fingerprint(mod)
    fpass = make_add_to_mul(opt_level=1, name="function_pass_test")
    assert isinstance(fpass, FunctionPass)
    assert fpass.info == PassInfo(1, "function_pass_test")

    updated = fpass(mod)
    assert updated is not mod
    assert [gv.name_hint for gv in updated.functions] == ["myAdd", "myLog"]
    assert op_names(updated["myAdd"]) == ["test_pass.multiply"]
    assert updated["myLog"] is mod["myLog"]  # nothing to rewrite: the same object
    assert fingerprint(mod) == before
    assert add_to_mul_func(mod["myAdd"], mod, None).params == mod["myAdd"].params


def test_function_class_pass():
    @function_pass(opt_level=2)
    class WrapInLog:
        def __init__(self, times):
            self.times = times

        def transform_function(self, func, mod, ctx):
            body = func.body
            for _ in range(self.times):
                body = log(body)
            return ir.Function(func.params, body, func.ret_type, func.attrs)

    fpass = WrapInLog(2)
    assert isinstance(fpass, FunctionPass) and fpass.info.name == "WrapInLog"
    assert fpass.times == 2
    updated = fpass(make_module())
    assert op_names(updated["myAdd"]) == ["test_pass.add", "test_pass.log", "test_pass.log"]


def test_function_pass_skips_skip_optimization_functions():
    mod = make_module()
    mod["myAdd"] = mod["myAdd"].with_attr("SkipOptimization", True)
    seen: list[str] = []

    def record(func, mod, ctx):
        seen.append(op_names(func.body)[-1])
        return add_to_mul_func(func, mod, ctx)

    updated = function_pass(record, opt_level=0, name="Record")(mod)
    assert seen == ["test_pass.log"]
    assert updated["myAdd"] is mod["myAdd"]


def test_function_pass_sees_the_module_as_it_was_before_the_pass():
    mod = make_module()
    seen_bodies = []

    def rewrite_and_look(func, snapshot, ctx):
        seen_bodies.append({gv.name_hint: f for gv, f in snapshot.items()})
        return add_to_mul_func(func, snapshot, ctx)

    function_pass(rewrite_and_look, opt_level=0, name="Look")(mod)
    # myLog's call saw myAdd before it was rewritten
    assert seen_bodies[1]["myAdd"] is mod["myAdd"]


def test_function_pass_returning_non_function_names_pass_and_function():
    bad = function_pass(lambda func, mod, ctx: func.body, opt_level=0, name="ReturnsBody")
    with pytest.raises(PassReturnTypeError, match="'ReturnsBody' returned Call for function 'myAdd'"):
        bad(make_module())


@pytest.mark.parametrize("action", ["add", "remove"])
def test_function_pass_cannot_add_or_remove_functions(action):
    def change_module(func, mod, ctx):
        if action == "add":
            mod["sneaky"] = func
        else:
            del mod["myLog"]
        return func

    mod = make_module()
    before = fingerprint(mod)
    with pytest.raises(FunctionSetChangedError, match="'ChangesModule'") as info:
        function_pass(change_module, opt_level=0, name="ChangesModule")(mod)
    assert ("sneaky" if action == "add" else "myLog") in str(info.value)
    assert fingerprint(mod) == before


def test_exception_in_function_pass_keeps_type_and_names_pass_and_function():
    class MyError(Exception):
        pass

    def explode(func, mod, ctx):
        if func.params[0].name_hint == "z":
            raise MyError("boom")
        return func

    with pytest.raises(MyError, match="boom") as info:
        Sequential([function_pass(explode, opt_level=0, name="Explode")], name="outer")(make_module())
    notes = "\n".join(info.value.__notes__)
    assert "function pass 'Explode' on function 'myLog'" in notes
    assert "pass 'outer'" in notes


# ----- decorators ---------------------------------------------------------------------


def test_decorator_argument_checks():
    with pytest.raises(ValueError, match="Please provide opt_level for the module pass"):
        module_pass(lambda mod, ctx: mod)
    with pytest.raises(ValueError, match="Please provide opt_level for the function pass"):
        function_pass(lambda f, mod, ctx: f)
    with pytest.raises(TypeError, match="required of a module pass must be a list or tuple"):
        module_pass(lambda mod, ctx: mod, opt_level=1, required="InferType")
    with pytest.raises(TypeError, match="pass_func must be a callable for Function pass"):
        function_pass(opt_level=1, name="x")(42)
    with pytest.raises(TypeError, match="must define transform_module"):
        module_pass(opt_level=1)(type("NoTransform", (), {}))


def test_decorator_uses_function_name_and_required():
    @module_pass(opt_level=2, required=["A", "B"])
    def my_pass(mod, ctx):
        return mod

    assert isinstance(my_pass, Pass)
    assert my_pass.info == PassInfo(2, "my_pass", ("A", "B"))


# ----- Sequential -------------------------------------------------------------------------


def test_sequential_no_pass():
    mod = make_module()
    result = Sequential(opt_level=1)(mod)
    assert result["myAdd"] is mod["myAdd"]


def test_sequential_module_and_function_passes():
    mod = make_module()
    before = fingerprint(mod)
    seq = Sequential([make_add_abs_function(opt_level=1), make_add_to_mul(opt_level=2)], opt_level=2)
    assert seq.info == PassInfo(2, "sequential")
    result = seq(mod)
    assert [gv.name_hint for gv in result.functions] == ["myAdd", "myLog", "myAbs"]
    assert op_names(result["myAdd"]) == ["test_pass.multiply"]
    assert fingerprint(mod) == before


@pytest.mark.parametrize(
    "ctx_kwargs, expected",
    [
        ({}, ["o1", "o2"]),  # default opt_level 2
        ({"opt_level": 3}, ["o1", "o2", "o3"]),
        ({"opt_level": 0}, []),
        ({"opt_level": 0, "required_pass": ["o3"]}, ["o3"]),  # required beats opt_level
        ({"opt_level": 3, "disabled_pass": ["o2"]}, ["o1", "o3"]),
        ({"opt_level": 3, "required_pass": ["o1"], "disabled_pass": ["o1"]}, ["o2", "o3"]),  # disabled wins
    ],
)
def test_sequential_enabling(ctx_kwargs, expected):
    ran: list[str] = []
    seq = Sequential([make_tracer(ran, f"o{level}", opt_level=level) for level in (1, 2, 3)])
    with PassContext(**ctx_kwargs):
        seq(make_module())
    assert ran == expected


def test_pass_called_directly_always_runs():
    ran: list[str] = []
    tracer = make_tracer(ran, "Heavy", opt_level=4)
    with PassContext(opt_level=0, disabled_pass=["Heavy"]):
        tracer(make_module())
    assert ran == ["Heavy"]


def test_nested_sequential_with_scoping():
    ran: list[str] = []
    inner = Sequential([make_tracer(ran, "a", 1), make_tracer(ran, "b", 3)], opt_level=2, name="inner")
    outer = Sequential([inner, make_tracer(ran, "c", 0)], opt_level=0, name="outer")
    with PassContext(opt_level=2):
        outer(make_module())
    assert ran == ["a", "c"]  # inner runs (its own opt_level 2), and gates b itself
    ran.clear()
    with PassContext(opt_level=1):
        outer(make_module())
    assert ran == ["c"]  # inner is gated by its own info
    ran.clear()
    with PassContext(opt_level=3, disabled_pass=["inner"]):
        outer(make_module())
    assert ran == ["c"]


def test_sequential_with_scoping_required_pass_function_pass():
    mod = make_module()
    seq = Sequential([make_add_to_mul(opt_level=3)])
    with PassContext(opt_level=2):
        assert op_names(seq(mod)["myAdd"]) == ["test_pass.add"]
    with PassContext(opt_level=2, required_pass=["AddToMul"]):
        assert op_names(seq(mod)["myAdd"]) == ["test_pass.multiply"]


def test_sequential_rejects_non_passes():
    with pytest.raises(PassArgumentError, match="item 1 is int"):
        Sequential([make_add_to_mul(), 3])
    with pytest.raises(PassArgumentError, match="list or tuple of passes"):
        Sequential(make_add_to_mul())


# ----- PrintIR, instruments seen from the pass manager ----------------------------------------


def test_print_ir(capsys):
    from passinfra.transform import PrintIR

    mod = make_module()
    seq = Sequential([make_add_to_mul(opt_level=0), PrintIR("after rewrite"), make_add_abs_function(0)])
    result = seq(mod)
    err = capsys.readouterr().err
    assert "PrintIR(after rewrite)" in err
    assert "myAdd" in err and "myAbs" not in err  # printed between the two passes
    assert "myAbs" in result


def test_pass_counter_instrument_counts_zero_n_zero():
    @pass_instrument
    class PassesCounter:
        def __init__(self):
            self.run_before_count = 0
            self.run_after_count = 0

        def _clear(self):
            self.run_before_count = 0
            self.run_after_count = 0

        def enter_pass_ctx(self):
            self._clear()

        def exit_pass_ctx(self):
            self._clear()

        def run_before_pass(self, mod, info):
            self.run_before_count += 1

        def run_after_pass(self, mod, info):
            self.run_after_count += 1

    counter = PassesCounter()
    seq = Sequential([make_add_to_mul(0), make_add_abs_function(0)], name="pipeline")
    assert counter.run_before_count == 0
    with PassContext(instruments=[counter]):
        seq(make_module())
        assert counter.run_before_count == 3 and counter.run_after_count == 3  # 2 passes + pipeline
    assert counter.run_before_count == 0 and counter.run_after_count == 0


# ----- deep programs: the infrastructure adds no recursion --------------------------------


def test_function_pass_on_100000_op_and_let_chains():
    x = ir.var("x", (2,))
    body = x
    for _ in range(100_000):
        body = add(body, x)
    y = ir.var("y", (2,))
    let_body: ir.Expr = y
    for i in range(100_000):  # built inside out: let v_i = y + y; <rest>
        let_body = ir.Let(ir.Var(f"v{i}"), add(y, y), let_body)
    mod = ir.IRModule({"ops": ir.Function([x], body), "lets": ir.Function([y], let_body)})
    with PassContext(instruments=[PassTimingInstrument()]):
        result = Sequential([make_add_to_mul(0)])(mod)
    new_body = result["ops"].body
    assert new_body.op is MUL and new_body.args[0].op is MUL
    assert result["lets"].body.value.op is MUL
    assert mod["ops"].body.op is ADD and mod["lets"].body.value.op is ADD
