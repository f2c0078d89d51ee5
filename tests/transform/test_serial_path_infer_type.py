"""InferType on the serial path (issue 16, item 3), asserted through its counters:

- a function whose type is cached is not inferred again; a module whose functions are
  all typed is returned without walking anything;
- after a function stage whose workers typed their results, the driver's InferType
  infers none of them, and the module prints as the in-process run's;
- results and errors are those of inferring the module from scratch.
"""

from __future__ import annotations

import pytest

from passinfra import ir
from passinfra.errors import IRTypeError
from passinfra.ir import op
from passinfra.ir.type_infer import infer_module, infer_type
from passinfra.transform import PassContext, Sequential, function_pass, get_pass
from passinfra.transform.builtin import infer_type as infer_type_pass
from passinfra.transform.builtin.infer_type import infer_type_counts
from tests.scheduler import passes_for_tests as P


def counts_of(run) -> dict[str, int]:
    before = infer_type_counts()
    run()
    after = infer_type_counts()
    return {key: after[key] - before[key] for key in after}


def small_module(count: int = 5) -> ir.IRModule:
    mod = ir.IRModule()
    for i in range(count):
        x = ir.var("x", (3, 4))
        mod[f"f{i}"] = ir.Function([x], op.exp(op.add(x, ir.const(float(i)))))
    return mod


def test_a_typed_module_is_returned_without_inference(monkeypatch):
    mod = infer_module(small_module())
    walked = []
    monkeypatch.setattr(infer_type_pass, "infer_module", lambda m: walked.append(m) or m)
    result = {}
    counts = counts_of(lambda: result.setdefault("out", get_pass("InferType")(mod)))
    out = result["out"]
    assert not walked
    assert counts == {"runs": 1, "functions_inferred": 0, "functions_skipped": 5}
    assert out is not mod and list(out.items()) == list(mod.items())  # a new module, same functions


def test_only_untyped_functions_are_counted_as_inferred():
    mod = infer_module(small_module())
    x = ir.var("x", (3, 4))
    mod["g"] = ir.Function([x], op.negative(x))  # the one untyped function
    result = {}
    counts = counts_of(lambda: result.setdefault("out", get_pass("InferType")(mod)))
    assert counts == {"runs": 1, "functions_inferred": 1, "functions_skipped": 5}
    tensor = ir.TensorType((3, 4), "float32")
    assert result["out"]["g"].checked_type == ir.FuncType([tensor], tensor)
    assert result["out"].astext() == mod.astext()


def test_errors_are_those_of_inferring_from_scratch():
    def broken() -> ir.IRModule:
        mod = small_module(3)
        x = ir.var("x", (3, 4))
        y = ir.var("y", (5,))
        mod["bad"] = ir.Function([x, y], op.add(x, y))  # shapes do not broadcast
        return mod

    with pytest.raises(IRTypeError) as from_scratch:
        infer_module(broken())
    typed_first = broken()
    for name in ("f0", "f1", "f2"):  # the good functions typed already: skipped, same error
        infer_type(typed_first[name], typed_first)
    with pytest.raises(IRTypeError) as from_pass:
        get_pass("InferType")(typed_first)
    assert type(from_pass.value) is type(from_scratch.value)
    assert str(from_pass.value) == str(from_scratch.value)


def _pipeline() -> Sequential:
    # AddToMultiply rewrites every function; the InferType after it is the driver's
    return Sequential([get_pass("InferType"), P.add_to_multiply, get_pass("InferType")], opt_level=0)


def test_the_driver_does_not_infer_what_the_workers_typed(ray_scheduler):
    # two equal modules: types are caches on the nodes, so one run would type the other's input
    local_input, remote_input = P.chain_module(8), P.chain_module(8)
    with PassContext(opt_level=3):
        local = {}
        local_counts = counts_of(lambda: local.setdefault("out", _pipeline()(local_input)))
        sched = ray_scheduler(2)
        remote = {}
        remote_counts = counts_of(lambda: remote.setdefault("out", sched.run(_pipeline(), remote_input)))
    # in-process, the second InferType infers the 8 rewritten functions ...
    assert local_counts == {"runs": 2, "functions_inferred": 16, "functions_skipped": 0}
    # ... on the workers they come back typed, and the driver infers none of them
    assert remote_counts == {"runs": 2, "functions_inferred": 8, "functions_skipped": 8}
    assert sched.last_run.worker_typing_seconds > 0
    assert remote["out"].astext() == local["out"].astext()
    for name in local["out"].functions:
        assert remote["out"][name].checked_type == local["out"][name].checked_type


class _FreshCalls(ir.ExprMutator):
    """Every call rebuilt as a new, untyped node: typing a call of another global function
    then needs that function's type."""

    def visit_call(self, call):
        new = super().visit_call(call)
        return ir.Call(new.op, list(new.args), new.attrs) if new is call else new


@function_pass(opt_level=0, name="FreshCalls", reads_module=False)
def fresh_calls(func, mod, ctx):
    return _FreshCalls().visit(func)


def test_functions_the_workers_could_not_type_are_inferred_by_the_driver(ray_scheduler):
    # a caller's type needs the helper's, which the worker holding the caller may lack
    pipeline = Sequential([get_pass("InferType"), fresh_calls, get_pass("InferType")], opt_level=0)
    with PassContext(opt_level=3):
        local = {}
        local_counts = counts_of(lambda: local.setdefault("out", pipeline(P.calling_module(6))))
        sched = ray_scheduler(2)
        remote = {}
        counts = counts_of(lambda: remote.setdefault("out", sched.run(pipeline, P.calling_module(6))))
    functions = 7
    assert local_counts == {"runs": 2, "functions_inferred": 2 * functions, "functions_skipped": 0}
    assert counts["runs"] == 2
    inferred_after_the_stage = counts["functions_inferred"] - functions
    # the callers placed apart from the helper came back untyped, the others typed
    assert 0 < inferred_after_the_stage < functions
    assert remote["out"].astext() == local["out"].astext()
    for name in local["out"].functions:
        assert remote["out"][name].checked_type == local["out"][name].checked_type
