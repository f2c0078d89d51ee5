"""Property tests over random well-typed programs (tests/strategies.py).

Every generated program must type-check to the types the generator tracked, be
well-formed, print and parse back to a structurally equal module, hash like its copies,
pickle, and evaluate to the same finite values before and after pickling.
"""

from __future__ import annotations

import collections
import pickle
from typing import Any

import numpy as np
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from passinfra import evaluate, ir
from passinfra.testing import make_chain
from tests.strategies import (
    GEN_SETTINGS,
    PARAM_BOUND,
    modules_with_many_functions,
    program_inputs,
    programs,
    typed_programs,
)

SMALL = 30  # max_nodes for the per-example properties: fast, yet every construct appears

# --------------------------------------------------------------------------------------
# helpers


def _value_leaves(value: Any, ty: ir.Type) -> list[tuple[np.ndarray, ir.TensorType]]:
    """Pair every array in an evaluation result with its tensor type."""
    if isinstance(ty, ir.TupleType):
        assert isinstance(value, (tuple, list)), f"expected a tuple value for {ty!r}, got {type(value)}"
        assert len(value) == len(ty.fields)
        return [leaf for v, t in zip(value, ty.fields) for leaf in _value_leaves(v, t)]
    return [(np.asarray(value), ty)]


def _assert_identical(actual: Any, expected: Any) -> None:
    """Same nesting, dtypes, shapes and bits."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _assert_identical(a, e)
        return
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)


def _parent_counts(func: ir.Function) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for node in ir.iter_post_order(func):
        for child in ir.expr_children(node):
            counts[child] += 1
    return counts


BINARY_OPS = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power")


def _features(mod: ir.IRModule) -> set[str]:
    """The constructs a module uses, by name (for the coverage test)."""
    ir.infer_type(mod)
    found: set[str] = set()
    for func in mod.functions.values():
        found.update(f"param:{p.type_annotation.dtype}" for p in func.params)
        for node, parents in _parent_counts(func).items():
            if isinstance(node, ir.Call) and parents > 1:
                found.add("shared call")
        for node in ir.iter_post_order(func):
            found.add(type(node).__name__)
            if isinstance(node, ir.Function) and node is not func:
                found.add("closure")
            elif isinstance(node, ir.Let) and node.var.type_annotation is not None:
                found.add("annotated let")
            elif isinstance(node, ir.Constant):
                found.add("meta constant" if node.data.size > 8 else "inline constant")
            elif isinstance(node, ir.Call) and isinstance(node.op, ir.GlobalVar):
                found.add("global call")
            elif isinstance(node, ir.Call) and isinstance(node.op, ir.Op):
                found.add(node.op.name)
                if node.op.name in BINARY_OPS and len({a.checked_type.shape for a in node.args}) > 1:
                    found.add("broadcast")
    return found


# --------------------------------------------------------------------------------------
# type checking


@GEN_SETTINGS
@given(typed_programs(max_nodes=SMALL))
def test_infer_type_agrees_with_the_generator_and_programs_are_well_formed(program):
    mod = program.mod
    assert ir.infer_type(mod) is mod
    for name, tracked in program.ret_types.items():
        assert mod[name].body.checked_type == tracked, f"function {name}"
    ir.verify_well_formed(mod)


# --------------------------------------------------------------------------------------
# text


@GEN_SETTINGS
@given(programs(max_nodes=SMALL))
def test_text_round_trips(mod):
    text = mod.astext()
    assert mod.astext() == text  # printing is deterministic
    parsed = ir.parse(text)
    ir.assert_structural_equal(parsed, mod)
    assert parsed.astext() == text


# --------------------------------------------------------------------------------------
# structural equality and hashing


def _distinct_copies(mod: ir.IRModule) -> list[ir.IRModule]:
    return [ir.parse(mod.astext()), pickle.loads(pickle.dumps(mod))]


@GEN_SETTINGS
@given(programs(max_nodes=SMALL))
def test_structurally_equal_copies_hash_equal(mod):
    for copy in _distinct_copies(mod):
        assert copy["main"] is not mod["main"]
        assert ir.structural_equal(copy, mod)
        assert ir.structural_hash(copy) == ir.structural_hash(mod)
        for gv, func in mod.functions.items():
            assert ir.structural_equal(copy[gv], func)
            assert ir.structural_hash(copy[gv]) == ir.structural_hash(func)


@GEN_SETTINGS
@given(programs(max_nodes=SMALL))
def test_a_changed_program_is_not_structurally_equal(mod):
    main = mod["main"]
    changed = mod.copy()
    changed["main"] = ir.Function(main.params, ir.Tuple([main.body]), None, main.attrs)
    assert not ir.structural_equal(changed, mod)
    assert not ir.structural_equal(changed["main"], main)


# --------------------------------------------------------------------------------------
# pickling and evaluation


def _pickle_copies(mod: ir.IRModule) -> list[ir.IRModule]:
    buffers: list[pickle.PickleBuffer] = []
    out_of_band = pickle.dumps(mod, protocol=5, buffer_callback=buffers.append)
    return [
        pickle.loads(pickle.dumps(mod)),
        pickle.loads(pickle.dumps(mod, protocol=5)),
        pickle.loads(out_of_band, buffers=buffers),
    ]


@GEN_SETTINGS
@given(typed_programs(max_nodes=SMALL), st.integers(0, 2**16))
def test_pickling_preserves_structure_and_values(program, seed):
    mod = program.mod
    inputs = program_inputs(mod, seed)
    expected = evaluate(mod, *inputs)
    # the generator promises finite values of the types it tracked
    for array, ty in _value_leaves(expected, program.ret_types["main"]):
        assert array.shape == ty.shape and array.dtype.name == ty.dtype
        if array.dtype.kind == "f":
            assert np.all(np.isfinite(array))
    for restored in _pickle_copies(mod):
        ir.assert_structural_equal(restored, mod)
        _assert_identical(evaluate(restored, *inputs), expected)


# --------------------------------------------------------------------------------------
# the generator itself

REQUIRED_FEATURES = {
    "Let", "annotated let", "If", "Tuple", "TupleGetItem", "closure", "global call", "shared call",
    "meta constant", "inline constant", "broadcast", "param:bool", "param:float32", "param:float64",
    # ops of every pattern kind
    "add", "subtract", "multiply", "divide", "negative", "exp", "log", "sqrt", "abs", "tanh",
    "sigmoid", "maximum", "minimum", "power", "reshape", "transpose", "concatenate", "split",
    "squeeze", "expand_dims", "sum", "mean", "max", "matmul", "zeros", "ones", "full", "cast",
    "where", "take", "nn.conv2d", "nn.dense", "nn.bias_add", "nn.relu", "nn.softmax",
    "nn.batch_norm", "nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.layer_norm",
    "nn.gelu",
}


def test_generator_covers_every_construct():
    seen: set[str] = set()

    @settings(max_examples=150, deadline=None, phases=[Phase.generate], database=None, derandomize=True,
              suppress_health_check=GEN_SETTINGS.suppress_health_check)
    @given(programs(max_nodes=40))
    def collect(mod):
        seen.update(_features(mod))

    collect()
    assert REQUIRED_FEATURES - seen == set()


@GEN_SETTINGS
@given(programs(max_nodes=SMALL, allow_control_flow=False, allow_closures=False))
def test_generator_options_leave_out_control_flow_and_closures(mod):
    for func in mod.functions.values():
        for node in ir.iter_post_order(func):
            assert not isinstance(node, ir.If)
            assert not (isinstance(node, ir.Function) and node is not func)
        assert all(p.type_annotation.dtype != "bool" for p in func.params)


def test_stateful_ops_only_when_allowed():
    def uses_random(mod: ir.IRModule) -> bool:
        return any(
            isinstance(node, ir.Call) and isinstance(node.op, ir.Op) and node.op.stateful
            for func in mod.functions.values()
            for node in ir.iter_post_order(func)
        )

    results = {True: [], False: []}

    @settings(max_examples=60, deadline=None, phases=[Phase.generate], database=None, derandomize=True,
              suppress_health_check=GEN_SETTINGS.suppress_health_check)
    @given(st.booleans().flatmap(lambda allow: st.tuples(st.just(allow), programs(allow_stateful=allow))))
    def collect(case):
        allow, mod = case
        results[allow].append(uses_random(mod))

    collect()
    assert not any(results[False])
    assert any(results[True])


@GEN_SETTINGS
@given(programs(max_nodes=SMALL), st.integers(0, 2**16))
def test_program_inputs_match_main_parameters(mod, seed):
    inputs = program_inputs(mod, seed)
    params = mod["main"].params
    assert len(inputs) == len(params)
    for array, param in zip(inputs, params):
        ty = param.type_annotation
        assert array.shape == ty.shape and array.dtype.name == ty.dtype
        if array.dtype.kind == "f":
            assert np.all(np.abs(array) <= PARAM_BOUND)
    _assert_identical(program_inputs(mod, seed), inputs)  # deterministic in the seed


@settings(max_examples=10, deadline=None, suppress_health_check=GEN_SETTINGS.suppress_health_check)
@given(modules_with_many_functions())
def test_many_function_modules_are_typed_dags(mod):
    assert len(mod) >= 6  # at least five independent functions and main
    names = [gv.name_hint for gv in mod.functions]
    assert names[-1] == "main"
    ir.infer_type(mod)
    for position, func in enumerate(mod.functions.values()):
        callees = {
            node.op.name_hint
            for node in ir.iter_post_order(func)
            if isinstance(node, ir.Call) and isinstance(node.op, ir.GlobalVar)
        }
        assert callees <= set(names[:position]), "calls must go to earlier functions only"


def test_make_chain_computes_n_plus_one_times_x():
    x = np.array([0.5, -2.0], dtype="float32")
    for kind in ("add", "let"):
        mod = make_chain(7, kind)
        adds = [n for n in ir.iter_post_order(mod["main"]) if isinstance(n, ir.Call)]
        assert len(adds) == 7
        np.testing.assert_array_equal(evaluate(mod, x), 8 * x)
    lets = [n for n in ir.iter_post_order(make_chain(7, "let")["main"]) if isinstance(n, ir.Let)]
    assert len(lets) == 7
