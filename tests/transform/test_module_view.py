"""The module a function pass sees (passinfra.transform.module_view): a pass that promised
``reads_module=False`` sees its own function only, and breaking the promise raises the
same ModuleReadError in-process, through Scheduler(backend="local") and on Ray workers."""

from __future__ import annotations

import pickle

import pytest

from passinfra import ir
from passinfra.ir import op
from passinfra.transform import PassContext, Sequential, function_pass
from passinfra.transform.builtin.simplify_inference import SimplifyInference
from passinfra.transform.errors import FunctionSetChangedError, PassError
from passinfra.transform.module_view import (
    FunctionOnlyView,
    ModuleReadError,
    ModuleView,
    function_view,
)
from scheduler import Scheduler
from tests.scheduler import passes_for_tests as P


def _peek_at_f0():
    """Promises reads_module=False, then reads function f0 (fine on f0 itself)."""

    @function_pass(opt_level=0, name="PeekAtF0", reads_module=False)
    def peek(func, mod, ctx):
        return func.with_attr("f0_params", len(mod["f0"].params))

    return peek


def _run_everywhere(pipeline, mod, ray_scheduler, ctx_config=None):
    """The exception each executor raises: in-process, Scheduler local, Scheduler ray
    (on the workers), and Scheduler ray with the stage run in its driver."""
    raised = {}
    runners = {
        "in-process": lambda: pipeline(mod),
        "local": lambda: Scheduler(backend="local").run(pipeline, mod),
        "ray": lambda: ray_scheduler(2).run(pipeline, mod),
    }
    for where, run in runners.items():
        with PassContext(opt_level=3, config=ctx_config), pytest.raises(Exception) as info:
            run()
        raised[where] = info.value
    with PassContext(opt_level=3, config={**(ctx_config or {}), "scheduler.min_stage_functions": 1000}):
        with pytest.raises(Exception) as info:
            ray_scheduler(2).run(pipeline, mod)
    raised["ray driver"] = info.value
    return raised


def test_a_broken_promise_raises_the_same_error_everywhere(ray_scheduler):
    pipeline = Sequential([P.add_to_multiply, _peek_at_f0()], opt_level=0)
    raised = _run_everywhere(pipeline, P.chain_module(6), ray_scheduler)
    for where, error in raised.items():
        assert type(error) is ModuleReadError, (where, error)
        # f0 may read itself; f1 is the first function whose read breaks the promise
        assert (error.pass_name, error.function, error.read) == ("PeekAtF0", "f1", "f0"), where
    messages = {where: str(error) for where, error in raised.items()}
    assert len(set(messages.values())) == 1, messages
    message = messages["in-process"]
    assert "'PeekAtF0'" in message and "reads_module=False" in message
    assert "function 'f0'" in message and "transforming 'f1'" in message
    assert isinstance(raised["in-process"], PassError)


def test_a_pass_writing_the_module_is_named_everywhere(ray_scheduler):
    @function_pass(opt_level=0, name="SneakFunctionIn", reads_module=False)
    def sneak(func, mod, ctx):
        mod["sneaked"] = func
        return func

    raised = _run_everywhere(Sequential([P.identity, sneak], opt_level=0), P.chain_module(4), ray_scheduler)
    messages = {where: (type(error), str(error)) for where, error in raised.items()}
    assert len(set(messages.values())) == 1, messages
    error_type, message = messages["in-process"]
    assert error_type is FunctionSetChangedError
    assert "'SneakFunctionIn'" in message and "'sneaked'" in message


def _stamp():
    @function_pass(opt_level=0, name="Stamp", reads_module=False)
    def stamp(func, mod, ctx):
        return func.with_attr("stamped", True)

    return stamp


def _look_at_own():
    """Looks its own function up in the module (by the name the view holds) and records
    what it found: the function as the previous pass left it."""

    @function_pass(opt_level=0, name="LookAtOwn", reads_module=False)
    def look(func, mod, ctx):
        [(gv, own)] = mod.items()  # the view holds exactly the function being transformed
        seen = own is func and mod[gv.name_hint] is func and gv in mod and len(mod) == 1
        return func.with_attr("own_seen", seen).with_attr("own_stamped", bool(own.attrs.get("stamped")))

    return look


def test_a_pass_sees_its_own_function_as_the_previous_pass_left_it(ray_scheduler):
    pipeline = Sequential([_stamp(), _look_at_own()], opt_level=0)
    mod = P.chain_module(6)
    expected = pipeline(mod)
    assert all(f.attrs["own_seen"] and f.attrs["own_stamped"] for f in expected.functions.values())
    # on the workers both passes run in one batch per function: the view must still show
    # the stamped function, not the one the batch started from
    out = ray_scheduler(2).run(pipeline, mod)
    stats = ray_scheduler(2).last_run
    (stage,) = stats.stages
    assert not stage.ran_in_driver and stage.remote_calls >= 2
    for call in (record for record in stats.calls if record.kind.value == "answered"):
        ran = {(run.function, run.key) for run in call.runs}
        assert ran == {(name, leaf) for name, _ in ran for leaf in (0, 1)}  # both passes, one call
    assert out.astext() == expected.astext()


# a read of f0 is fine while f0 itself is transformed, so f1 is the first to break it
@pytest.mark.parametrize(
    "read, what, first",
    [
        (lambda mod: mod["f0"], "function 'f0'", "f1"),
        (lambda mod: mod[ir.GlobalVar("f0")], "function 'f0'", "f1"),
        (lambda mod: "f0" in mod, "function 'f0'", "f1"),
        (lambda mod: mod.functions.get(ir.GlobalVar("f0")), "function 'f0'", "f1"),
        (lambda mod: mod.functions[ir.GlobalVar("f0")], "function 'f0'", "f1"),
        (lambda mod: mod.get_global_var("f0"), "function 'f0'", "f1"),
        (lambda mod: mod["no_such_function"], "function 'no_such_function'", "f0"),
        (lambda mod: mod.attrs, "the module's attrs", "f0"),
        (lambda mod: mod.with_attr("k", 1), "the module's attrs", "f0"),
    ],
)
def test_every_way_of_reading_another_function_breaks_the_promise(read, what, first):
    @function_pass(opt_level=0, name="Reader", reads_module=False)
    def reader(func, mod, ctx):
        read(mod)
        return func

    with pytest.raises(ModuleReadError) as info:
        reader(P.chain_module(3).with_attr("k", 0))
    assert f"but read {what} while transforming {first!r}" in str(info.value)


def test_a_pass_that_reads_the_module_sees_all_of_it_without_a_copy():
    mod = P.chain_module(500)
    func = mod["f7"]
    view = function_view(P.count_callers, mod, "f7", func)
    assert isinstance(view, ModuleView)
    assert view._functions is mod._functions  # shared, not copied: a view per call is cheap
    assert len(view) == 500 and view["f499"] is mod["f499"]
    with pytest.raises(FunctionSetChangedError, match="'CountCallers'"):
        view["f0"] = func
    restricted = function_view(P.identity, mod, "f7", func)
    assert isinstance(restricted, FunctionOnlyView)
    assert restricted["f7"] is func and restricted._table is None  # no table until one is asked for
    assert len(restricted) == 1 and list(restricted.items()) == [(ir.GlobalVar("f7"), func)]


def test_the_error_crosses_process_boundaries_unchanged():
    error = ModuleReadError("PeekAtF0", "f1", "f0")
    error.add_note("raised by function pass 'PeekAtF0' on function 'f1'")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ModuleReadError and str(copy) == str(error)
    assert (copy.pass_name, copy.function, copy.read) == ("PeekAtF0", "f1", "f0")
    assert copy.__notes__ == error.__notes__


def test_a_pass_that_needs_types_on_an_untyped_module_runs_as_in_process(ray_scheduler):
    """SimplifyInference promises reads_module=False but, run bare (without its required
    InferType), types each untyped caller against the module to learn the helper's type.
    A worker holding a shard cannot: the scheduler runs that stage in its driver."""
    mod = P.calling_module(4)
    for func in mod.functions.values():
        assert func._checked_type is None
    with PassContext(opt_level=3):
        expected = SimplifyInference()(mod).astext()
    mod = P.calling_module(4)  # types are cached on nodes: start untyped again
    assert all(func._checked_type is None for func in mod.functions.values())
    sched = ray_scheduler(2)
    with PassContext(opt_level=3):
        out = sched.run(SimplifyInference(), mod)
    assert out.astext() == expected
    assert [stage.ran_in_driver for stage in sched.last_run.stages] == [True]


def test_typed_functions_still_go_to_the_workers(ray_scheduler):
    mod = P.calling_module(4)
    ir.infer_type(mod)
    sched = ray_scheduler(2)
    with PassContext(opt_level=3):
        expected = SimplifyInference()(mod).astext()
        out = sched.run(SimplifyInference(), mod)
    assert out.astext() == expected
    assert [stage.ran_in_driver for stage in sched.last_run.stages] == [False]
    assert sched.last_run.remote_calls > 0


def test_a_function_pass_can_still_build_a_module_of_its_own():
    """A pass may construct other modules freely; only the view it is handed is guarded."""

    @function_pass(opt_level=0, name="Scratch", reads_module=False)
    def scratch(func, mod, ctx):
        other = ir.IRModule.from_expr(op.negative(ir.var("y", (4,))))
        return func.with_attr("scratch_functions", len(other))

    out = scratch(P.chain_module(2))
    assert [f.attrs["scratch_functions"] for f in out.functions.values()] == [1, 1]
