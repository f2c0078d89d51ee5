"""PassContext: defaults, the per-thread stack, config, shipping to workers."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_testlib import make_add_to_mul, make_module, make_tracer, op_names

from passinfra.instrument import PassInstrument
from passinfra.transform import (
    PassArgumentError,
    PassConfigError,
    PassConfigTypeError,
    PassContext,
    PassContextError,
    PassInfo,
    Sequential,
    list_configs,
    register_config,
)

register_config("test_ctx.flag", bool)
register_config("test_ctx.depth", int)
register_config("test_ctx.ratio", float)
register_config("test_ctx.label", str)
register_config("test_ctx.options", dict)


def test_defaults():
    ctx = PassContext()
    assert ctx.opt_level == 2
    assert ctx.required_pass == () and ctx.disabled_pass == ()
    assert ctx.instruments == () and dict(ctx.config) == {}


def test_current_outside_any_with_is_a_per_thread_default():
    default = PassContext.current()
    assert default.opt_level == 2
    assert PassContext.current() is default
    with PassContext(opt_level=3) as ctx:
        assert PassContext.current() is ctx
        with PassContext(opt_level=1) as inner:
            assert PassContext.current() is inner
        assert PassContext.current() is ctx
    assert PassContext.current() is default


def test_nested_contexts_do_not_inherit_instruments():
    with PassContext(instruments=[PassInstrument()]):
        with PassContext(opt_level=3) as inner:
            assert inner.instruments == ()


def test_exiting_out_of_order_raises():
    outer, inner = PassContext(opt_level=1), PassContext(opt_level=3)
    outer.__enter__()
    inner.__enter__()
    try:
        expected = "out of order.*innermost context is PassContext\\(opt_level=3"
        with pytest.raises(PassContextError, match=expected):
            outer.__exit__(None, None, None)
        assert PassContext.current() is inner  # the failed exit left the stack alone
    finally:
        inner.__exit__(None, None, None)
        outer.__exit__(None, None, None)
    with pytest.raises(PassContextError, match="no context is entered"):
        outer.__exit__(None, None, None)


def test_argument_checks():
    with pytest.raises(PassArgumentError, match="opt_level must be an int"):
        PassContext(opt_level="3")
    with pytest.raises(TypeError, match="disabled_pass must be a list, tuple or set"):
        PassContext(disabled_pass="FoldConstant")
    with pytest.raises(TypeError, match="instruments must be PassInstrument objects"):
        PassContext(instruments=[object()])
    assert PassContext(required_pass={"b", "a"}).required_pass == ("a", "b")


# ----- config -------------------------------------------------------------------------------


def test_list_configs():
    configs = PassContext.list_configs()
    assert configs["test_ctx.flag"] == {"type": "bool"}
    assert configs["test_ctx.depth"] == {"type": "int"}
    assert configs == list_configs()


@pytest.mark.parametrize(
    "key, value, expected",
    [("test_ctx.flag", True, True), ("test_ctx.flag", 0, False), ("test_ctx.flag", 1, True),
     ("test_ctx.flag", np.bool_(True), True), ("test_ctx.depth", 7, 7), ("test_ctx.depth", np.int64(3), 3),
     ("test_ctx.ratio", 2, 2.0), ("test_ctx.label", "x", "x"), ("test_ctx.options", {"a": 1}, {"a": 1})],
)
def test_config_values_are_legalized(key, value, expected):
    ctx = PassContext(config={key: value})
    assert ctx.config[key] == expected and type(ctx.config[key]) is type(expected)
    assert ctx.get_config(key) == expected


@pytest.mark.parametrize(
    "key, value, type_name",
    [("test_ctx.flag", 2, "bool"), ("test_ctx.flag", "yes", "bool"), ("test_ctx.depth", True, "int"),
     ("test_ctx.depth", 1.5, "int"), ("test_ctx.ratio", "fast", "float"), ("test_ctx.label", 3, "str")],
)
def test_config_values_of_the_wrong_type_are_rejected(key, value, type_name):
    with pytest.raises(PassConfigTypeError) as info:
        PassContext(config={key: value})
    message = str(info.value)
    assert repr(key) in message and f"type {type_name}" in message and repr(value) in message


def test_unknown_config_key_names_it_and_lists_known_keys():
    with pytest.raises(ValueError, match="unknown PassContext config key 'test_ctx.typo'") as info:
        PassContext(config={"test_ctx.typo": 1})
    assert "test_ctx.depth" in str(info.value) and "test_ctx.flag" in str(info.value)
    with pytest.raises(ValueError, match="'test_ctx.nope'"):
        PassContext().get_config("test_ctx.nope")
    assert PassContext().get_config("test_ctx.depth", 5) == 5


def test_register_config_conflicts():
    register_config("test_ctx.flag", bool)  # same type again: fine
    with pytest.raises(PassConfigError, match="already registered with type bool"):
        register_config("test_ctx.flag", int)


def test_config_is_read_only():
    ctx = PassContext(config={"test_ctx.depth": 1})
    with pytest.raises(TypeError):
        ctx.config["test_ctx.depth"] = 2


# ----- enabling rule --------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    ctx_level=st.integers(0, 4), pass_level=st.integers(0, 4),
    required=st.booleans(), disabled=st.booleans(),
)
def test_enabling_rule(ctx_level, pass_level, required, disabled):
    ctx = PassContext(
        opt_level=ctx_level,
        required_pass=["p"] if required else None,
        disabled_pass=["p"] if disabled else None,
    )
    expected = False if disabled else (True if required else ctx_level >= pass_level)
    assert ctx.pass_enabled(PassInfo(pass_level, "p")) is expected
    ran: list[str] = []
    Sequential([make_tracer(ran, "p", pass_level)]).run(make_module(), ctx)
    assert (ran == ["p"]) is expected


# ----- shipping to workers -----------------------------------------------------------------------


def test_spec_round_trip_and_pickle_drop_instruments():
    ctx = PassContext(
        opt_level=3, required_pass=["A"], disabled_pass=["B"], instruments=[PassInstrument()],
        config={"test_ctx.depth": 4},
    )
    spec = ctx.to_spec()
    assert spec == {
        "opt_level": 3, "required_pass": ["A"], "disabled_pass": ["B"], "config": {"test_ctx.depth": 4}
    }
    for rebuilt in (PassContext.from_spec(spec), pickle.loads(pickle.dumps(ctx))):
        assert rebuilt.to_spec() == spec and rebuilt.instruments == ()


# ----- threads --------------------------------------------------------------------------------


def test_context_entered_in_one_thread_is_not_visible_in_another():
    seen = {}
    entered, checked = threading.Event(), threading.Event()

    def other_thread():
        entered.wait(5)
        seen["other"] = PassContext.current()
        checked.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    with PassContext(opt_level=0) as mine:
        entered.set()
        checked.wait(5)
    thread.join(5)
    assert seen["other"] is not mine
    assert seen["other"].opt_level == 2
    assert seen["other"] is not PassContext.current()  # each thread has its own default


def test_two_threads_run_pipelines_under_different_contexts_at_once():
    barrier = threading.Barrier(2, timeout=5)
    results: dict[int, list[str]] = {}
    errors: list[BaseException] = []

    def run(level: int) -> None:
        try:
            ran: list[str] = []

            def synchronizing(mod, ctx):
                barrier.wait()  # both threads are inside their pipelines now
                ran.append(f"sync@{PassContext.current().opt_level}")
                return mod

            from passinfra.transform import module_pass

            seq = Sequential([
                module_pass(synchronizing, opt_level=0, name="sync"),
                make_tracer(ran, "level3", opt_level=3),
                make_add_to_mul(opt_level=3),
            ])
            with PassContext(opt_level=level):
                mod = seq(make_module())
            ran.append(op_names(mod["myAdd"])[0])
            results[level] = ran
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(level,)) for level in (1, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not errors
    assert results[1] == ["sync@1", "test_pass.add"]
    assert results[3] == ["sync@3", "level3", "test_pass.multiply"]


def test_override_instruments_enters_and_exits_only_a_context_in_force():
    events: list[str] = []

    class Recorder(PassInstrument):
        def __init__(self, tag):
            self.tag = tag

        def enter_pass_ctx(self):
            events.append(f"enter {self.tag}")

        def exit_pass_ctx(self):
            events.append(f"exit {self.tag}")

    ctx = PassContext(instruments=[Recorder("a")])
    ctx.override_instruments([Recorder("b")])  # not entered yet: no hooks
    assert events == []
    with ctx:
        ctx.override_instruments([Recorder("c")])
    assert events == ["enter b", "exit b", "enter c", "exit c"]
    with pytest.raises(TypeError, match="list or tuple of PassInstrument"):
        ctx.override_instruments(Recorder("d"))
