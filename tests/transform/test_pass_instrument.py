"""Instruments, modelled on TVM's tests/python/relay/test_pass_instrument.py.

Unlike TVM, an exception keeps its own type (here ``DummyError``) instead of becoming a
generic runtime error.
"""

from __future__ import annotations

import re
import time

import pytest
from pass_testlib import make_add_abs_function, make_add_to_mul, make_module, make_tracer

from passinfra import ir
from passinfra.instrument import (
    DumpIR,
    PassInstrument,
    PassPrintingInstrument,
    PassTimingInstrument,
    PrintAfterAll,
    PrintBeforeAll,
    pass_instrument,
)
from passinfra.transform import PassContext, Sequential, module_pass


class DummyError(Exception):
    pass


@module_pass(opt_level=2)
def transform1(mod, ctx):
    print("    transform1 pass")
    return mod


@module_pass(opt_level=2)
def transform2(mod, ctx):
    print("    transform2 pass")
    return mod


@pass_instrument
class PI:
    """Prints every hook it sees, prefixed by its id."""

    def __init__(self, id):
        self.id = id

    def enter_pass_ctx(self):
        print(self.id + " enter_pass_ctx")

    def exit_pass_ctx(self):
        print(self.id + " exit_pass_ctx")

    def should_run(self, mod, info):
        print("  " + self.id + " should_run")
        return True

    def run_before_pass(self, mod, info):
        print("  " + self.id + " run_before_pass")

    def run_after_pass(self, mod, info):
        print("  " + self.id + " run_after_pass")


def broken(hook: str):
    """A PI whose ``hook`` prints, then raises DummyError."""

    def raising(self, *args):
        getattr(PI, hook)(self, *args)
        raise DummyError("Just a dummy error")

    return type(f"Broken_{hook}", (PI,), {hook: raising})


# ----- timing --------------------------------------------------------------------------------

LINE = re.compile(r"^(\t*)(\S+): (\d+)us \[(-?\d+)us\] \((\d+\.\d\d)%; (\d+\.\d\d)%\)")


def test_pass_timing_instrument():
    timing = PassTimingInstrument()
    ctx = PassContext.current()
    ctx.override_instruments([timing])
    try:
        mod = make_module()
        mod = make_add_to_mul()(mod)
        mod = Sequential([make_add_abs_function(0), make_add_to_mul(0, name="Again")], name="Pipeline")(mod)
        profiles = timing.render()
    finally:
        ctx.override_instruments(None)
    lines = profiles.splitlines()
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), profiles
    assert [(len(m.group(1)), m.group(2)) for m in parsed] == [
        (0, "AddToMul"), (0, "Pipeline"), (1, "AddAbsFunction"), (1, "Again")
    ]
    top_pct = [float(m.group(5)) for m in parsed if not m.group(1)]
    assert sum(top_pct) == pytest.approx(100.0, abs=0.02)
    # override_instruments(None) exited the timer: its data is gone
    assert timing.render() == ""


def test_timing_is_cleared_on_exit_and_survives_a_failing_pass():
    timing = PassTimingInstrument()

    @module_pass(opt_level=0)
    def failing(mod, ctx):
        raise DummyError("no")

    with PassContext(instruments=[timing]):
        with pytest.raises(DummyError):
            Sequential([make_add_to_mul(0), failing], name="outer")(make_module())
        make_add_to_mul(0, name="After")(make_module())
        tree = timing.timings()
        rendered = timing.render()
    assert [entry["name"] for entry in tree] == ["outer", "After"]  # After is not nested
    assert [child["name"] for child in tree[0]["children"]] == ["AddToMul", "failing"]
    assert tree[0]["children"][1]["failed"] and not tree[1]["failed"]
    # the failure is a query (failed_passes), never a suffix that breaks the line format
    assert "failing" in rendered and "[failed]" not in rendered
    assert timing.render() == "" and timing.timings() == []


def test_timing_spans_are_the_table_s_measurements_in_finishing_order():
    """The spans a trace draws (raypass compile --trace) are the timings' own numbers:
    each pass after the passes it ran, its seconds the tree's total to the microsecond."""
    timing = PassTimingInstrument()
    before = time.time()
    with PassContext(instruments=[timing]):
        Sequential([make_add_to_mul(0, name="First"), make_add_to_mul(0, name="Second")], name="outer")(
            make_module())
        spans, tree = timing.spans(), timing.timings()
    assert [name for name, _, _ in spans] == ["First", "Second", "outer"]
    totals = {tree[0]["name"]: tree[0]["total_us"],
              **{child["name"]: child["total_us"] for child in tree[0]["children"]}}
    for name, wall, seconds in spans:
        assert seconds * 1e6 == pytest.approx(totals[name], abs=1e-6)
        assert before <= wall <= time.time()
    assert spans[0][1] <= spans[1][1] and spans[2][1] <= spans[0][1]  # outer started first


def test_timing_renders_while_a_pass_is_running():
    timing = PassTimingInstrument()
    seen = []

    @module_pass(opt_level=0)
    def peek(mod, ctx):
        seen.append(timing.render())
        return mod

    with PassContext(instruments=[timing]):
        peek(make_module())
    assert seen[0].startswith("peek: ")


def test_timing_merges_worker_measurements():
    timing = PassTimingInstrument()
    with PassContext(instruments=[timing]):
        Sequential([make_add_to_mul(0, name="FoldConstant")], name="pipeline")(make_module())
        timing.record_remote("FoldConstant", "w0", 0.002, 25)
        timing.record_remote("FoldConstant", "w1", 0.0014, 15)
        rendered = timing.render()
        workers = timing.timings()[0]["children"][0]["workers"]
        with pytest.raises(KeyError, match="no run of pass 'Unknown'"):
            timing.record_remote("Unknown", "w0", 1.0, 1)
    line = next(line for line in rendered.splitlines() if "FoldConstant" in line)
    assert LINE.match(line) and line.endswith("[workers: 3400us cpu, 40 functions]")
    assert workers["functions"] == 40 and workers["worker_ids"] == ["w0", "w1"]
    assert workers["cpu_us"] == pytest.approx(3400)


# ----- custom instruments ----------------------------------------------------------------------


def test_custom_instrument(capsys):
    @pass_instrument
    class MyTest:
        def enter_pass_ctx(self):
            print("enter ctx")

        def exit_pass_ctx(self):
            print("exit ctx")

        def run_before_pass(self, mod, info):
            print("run before " + info.name)

        def run_after_pass(self, mod, info):
            print("run after " + info.name)

    assert MyTest.__name__ == "MyTest" and issubclass(MyTest, PassInstrument)
    with PassContext(instruments=[MyTest()]):
        make_add_to_mul()(make_module())
    assert capsys.readouterr().out == "enter ctx\nrun before AddToMul\nrun after AddToMul\nexit ctx\n"


def test_custom_instrument_by_subclass(capsys):
    class Names(PassInstrument):
        def run_after_pass(self, mod, info):
            print(f"{self.name} saw {info.name} with {len(mod)} functions")

    with PassContext(instruments=[Names()]):
        make_add_abs_function()(make_module())
    assert capsys.readouterr().out == "Names saw AddAbsFunction with 3 functions\n"


def test_pass_instrument_decorator_checks():
    with pytest.raises(TypeError, match="decorates a class"):
        pass_instrument(lambda: None)
    with pytest.raises(TypeError, match="defines none of the hooks"):
        pass_instrument(type("Empty", (), {}))


def test_disable_pass(capsys):
    @pass_instrument
    class CustomPI:
        def should_run(self, mod, info):
            return "InferType" in info.name

        def run_before_pass(self, mod, info):
            print(info.name)

    mod = make_module()
    with PassContext(instruments=[CustomPI()]):
        assert make_add_abs_function()(mod) is mod  # skipped: the module comes back as is
        make_tracer([], "InferType")(mod)
    assert capsys.readouterr().out == "InferType\n"


def test_should_run_asks_every_instrument_and_is_skipped_for_required_passes():
    asked: list[str] = []

    @pass_instrument
    class Veto:
        def __init__(self, answer):
            self.answer = answer

        def should_run(self, mod, info):
            asked.append(f"{self.answer}:{info.name}")
            return self.answer

    ran: list[str] = []
    with PassContext(instruments=[Veto(False), Veto(True)], required_pass=["Forced"]):
        make_tracer(ran, "Normal")(make_module())
        make_tracer(ran, "Forced")(make_module())
    assert asked == ["False:Normal", "True:Normal"]  # no short circuit; not asked for Forced
    assert ran == ["Forced"]


def test_multiple_instrument(capsys):
    @pass_instrument
    class SkipPass:
        def __init__(self, skip_pass_name):
            self.skip_pass_name = skip_pass_name

        def should_run(self, mod, info):
            return self.skip_pass_name not in info.name

    @pass_instrument
    class PrintPassName:
        def run_before_pass(self, mod, info):
            print(info.name)

    instruments = [SkipPass("AddAbs"), SkipPass("AddToMul"), PrintPassName()]
    with PassContext(instruments=instruments):
        mod = make_add_abs_function()(make_module())
        mod = make_add_to_mul()(mod)
        make_tracer([], "InferType")(mod)
    assert capsys.readouterr().out == "InferType\n"


def test_instrument_call_sequence(capsys):
    with PassContext(instruments=[PI("%1"), PI("%2")]):
        mod = transform1(make_module())
        transform2(mod)
    hooks = ["  %1 should_run", "  %2 should_run", "  %1 run_before_pass", "  %2 run_before_pass"]
    after = ["  %1 run_after_pass", "  %2 run_after_pass"]
    expected = ["%1 enter_pass_ctx", "%2 enter_pass_ctx",
                *hooks, "    transform1 pass", *after,
                *hooks, "    transform2 pass", *after,
                "%1 exit_pass_ctx", "%2 exit_pass_ctx"]
    assert capsys.readouterr().out.splitlines() == expected


def test_sequential_hooks_surround_its_passes(capsys):
    with PassContext(instruments=[PI("%1")]):
        Sequential([transform1], name="seq")(make_module())
    assert capsys.readouterr().out.splitlines() == [
        "%1 enter_pass_ctx",
        "  %1 should_run", "  %1 run_before_pass",  # the Sequential
        "  %1 should_run", "  %1 run_before_pass", "    transform1 pass", "  %1 run_after_pass",
        "  %1 run_after_pass",  # the Sequential
        "%1 exit_pass_ctx",
    ]


# ----- exceptions -----------------------------------------------------------------------------


def test_enter_pass_ctx_exception(capsys):
    ctx = PassContext(instruments=[PI("%1"), broken("enter_pass_ctx")("%2"), PI("%3")])
    with pytest.raises(DummyError):
        with ctx:
            pass
    # %1 entered, so it is exited again; %3 never entered
    assert capsys.readouterr().out == "%1 enter_pass_ctx\n%2 enter_pass_ctx\n%1 exit_pass_ctx\n"
    assert PassContext.current() is not ctx
    assert not ctx.instruments


def test_enter_pass_ctx_exception_global():
    current = PassContext.current()
    with pytest.raises(DummyError):
        current.override_instruments([broken("enter_pass_ctx")("%1")])
    assert not current.instruments


def test_exit_pass_ctx_exception(capsys):
    ctx = PassContext(instruments=[PI("%1"), broken("exit_pass_ctx")("%2"), PI("%3")])
    with pytest.raises(DummyError):
        with ctx:
            pass
    out = capsys.readouterr().out
    assert out.endswith("%1 exit_pass_ctx\n%2 exit_pass_ctx\n")
    assert PassContext.current() is not ctx
    assert not ctx.instruments


def test_exit_pass_ctx_exception_global():
    current = PassContext.current()
    with pytest.raises(DummyError):
        current.override_instruments([broken("exit_pass_ctx")("%1")])
        current.override_instruments([broken("exit_pass_ctx")("%1")])
    assert not current.instruments


def test_pass_exception(capsys):
    @module_pass(opt_level=2)
    def transform(mod, ctx):
        print("    transform pass")
        raise DummyError("Just a dummy error")

    with pytest.raises(DummyError) as info:
        with PassContext(instruments=[PI("%1")]):
            transform(make_module())
    assert capsys.readouterr().out.splitlines() == [
        "%1 enter_pass_ctx", "  %1 should_run", "  %1 run_before_pass", "    transform pass",
        "%1 exit_pass_ctx",
    ]
    assert "raised while running pass 'transform'" in info.value.__notes__


@pytest.mark.parametrize(
    "hook, expected_middle",
    [
        ("should_run", ["  %1 should_run"]),
        ("run_before_pass", ["  %1 should_run", "  %2 should_run", "  %1 run_before_pass"]),
        ("run_after_pass", ["  %1 should_run", "  %2 should_run", "  %1 run_before_pass",
                            "  %2 run_before_pass", "    transform1 pass", "  %1 run_after_pass"]),
    ],
)
def test_hook_exceptions(capsys, hook, expected_middle):
    with pytest.raises(DummyError) as info:
        with PassContext(instruments=[broken(hook)("%1"), PI("%2")]):
            transform1(make_module())
    assert capsys.readouterr().out.splitlines() == [
        "%1 enter_pass_ctx", "%2 enter_pass_ctx", *expected_middle, "%1 exit_pass_ctx", "%2 exit_pass_ctx",
    ]
    assert f"raised by instrument Broken_{hook}.{hook} for pass 'transform1'" in info.value.__notes__


def test_failing_cleanup_hook_does_not_hide_the_pass_error():
    class BadCleanup(PassInstrument):
        def on_pass_error(self, mod, info, error):
            raise RuntimeError("cleanup broke")

    @module_pass(opt_level=0)
    def explode(mod, ctx):
        raise DummyError("original")

    with pytest.raises(DummyError, match="original") as info:
        with PassContext(instruments=[BadCleanup()]):
            explode(make_module())
    assert any("cleanup broke" in note for note in info.value.__notes__)


# ----- IR printing instruments (need the printer) ----------------------------------------------


def test_print_before_and_after_all(capsys):
    with PassContext(instruments=[PrintBeforeAll(), PrintAfterAll()]):
        make_add_to_mul()(make_module())
    out = capsys.readouterr().out
    assert out.index("Before Running Pass: AddToMul") < out.index("After Running Pass: AddToMul")
    assert "test_pass.add" in out and "test_pass.multiply" in out


def test_pass_printing_instrument(capsys):
    printer = PassPrintingInstrument(print_before_pass_names=["AddToMul"], print_after_pass_names=["Other"])
    with PassContext(instruments=[printer]):
        mod = make_add_to_mul()(make_module())
        make_tracer([], "Other")(mod)
    out = capsys.readouterr().out
    assert "Before Running Pass: AddToMul" in out and "After Running Pass: Other" in out
    assert "After Running Pass: AddToMul" not in out and "Before Running Pass: Other" not in out


def test_dump_ir(tmp_path):
    dump_dir = tmp_path / "dumps"
    seq = Sequential([make_add_to_mul(0), make_add_abs_function(0)], name="pipe")
    with PassContext(instruments=[DumpIR(dump_dir)]):
        seq(make_module())
    names = sorted(path.name for path in dump_dir.iterdir())
    assert names == ["000_AddToMul.txt", "001_AddAbsFunction.txt", "002_pipe.txt"]
    assert "myAbs" not in (dump_dir / "000_AddToMul.txt").read_text()
    assert "myAbs" in (dump_dir / "001_AddAbsFunction.txt").read_text()


def test_input_module_is_never_mutated_under_instruments():
    mod = make_module()
    before = ir.structural_hash(mod)
    seq = Sequential([make_add_to_mul(0), make_add_abs_function(0)])
    with PassContext(instruments=[PassTimingInstrument(), PI("%1")]):
        seq(mod)
    assert ir.structural_hash(mod) == before
