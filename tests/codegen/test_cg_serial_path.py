"""The shorter serial path of a build (issue 16, item 3), asserted through counters and
results, never wall clock:

- one link step analyzes main once (PlanMemory's analysis is HostCodegen's), and only
  while main and its kernels are the very objects it was made from;
- memory planning finds a tensor's conflicts without visiting each once per step they
  share (counted), and places every tensor where the step-by-step planner did;
- the weights blob is each array copied once, byte for byte what concatenating each
  array's bytes with zero padding gives;
- a build stores itself in the whole-build cache while its library loads, finishes both
  before it returns, and reports errors as if the store had run first.
"""

from __future__ import annotations

import importlib
import random

import numpy as np
import pytest

import passinfra
from passinfra.build import compile_pipeline, run_link
from passinfra.codegen.artifacts import MemoryPlan, collect_link_products
from passinfra.codegen.host import (
    ALIGNMENT,
    HostProgram,
    KernelCall,
    analyze_main,
    host_program,
    pack_weights,
    plan_memory,
    render_host,
    shared_host_analysis,
    workspace_tensors,
)
from passinfra.codegen.object_cache import compile_stats
from passinfra.codegen.passes import HostCodegen, LinkLibrary, PlanMemory
from passinfra.ir import op
from passinfra.ir.expr import Function, Tuple, const, var
from passinfra.ir.module import IRModule
from passinfra.ir.type_infer import infer_type
from passinfra.runtime.module import Module
from passinfra.tir import PrimFunc
from passinfra.transform import PassContext, Sequential

F32 = "float32"
# the module (``passinfra.build`` the attribute is the function)
build_module = importlib.import_module("passinfra.build")


@pytest.fixture
def ctx(tmp_path):
    with PassContext(opt_level=3, config={"codegen.cache_dir": str(tmp_path / "cache")}) as context:
        yield context


def layered_model(layers: int = 3) -> IRModule:
    """Identical dense + bias + relu layers with their own weights (deduplicated kernels,
    one weight per layer), then a tuple result."""
    rng = np.random.default_rng(0)
    x = var("x", (2, 8))
    h = x
    for _ in range(layers):
        w = const(rng.standard_normal((8, 8)).astype(F32))
        b = const(rng.standard_normal(8).astype(F32))
        h = op.nn.relu(op.add(op.nn.dense(h, w), b))
    return IRModule.from_expr(Function([x], Tuple([h, op.exp(h)])))


def compiled(mod: IRModule) -> IRModule:
    return compile_pipeline()(mod)


def counter(name: str) -> int:
    return compile_stats().get(name, 0)


def reference_weights(weights: list[np.ndarray]) -> tuple[bytes, list[int]]:
    """The blob as the link step has always defined it: each array's C-order bytes at the
    next multiple of ALIGNMENT, zeros in between."""
    blob, offsets = b"", []
    for array in weights:
        start = -(-len(blob) // ALIGNMENT) * ALIGNMENT
        blob += bytes(start - len(blob))
        offsets.append(start)
        blob += np.ascontiguousarray(array).tobytes()
    return blob, offsets


# ----- one analysis per link step --------------------------------------------------------------
def test_a_link_step_analyzes_main_once(ctx):
    lowered = compiled(layered_model())
    before = counter("host_analyses")
    products = run_link(lowered)
    assert counter("host_analyses") - before == 1
    # the same passes outside a link step's sharing analyze once each
    before = counter("host_analyses")
    with collect_link_products() as separate:
        Sequential([PlanMemory(), HostCodegen(), LinkLibrary()])(lowered)
    assert counter("host_analyses") - before == 2
    # ... and make the very same products
    assert products.host.c_source == separate.host.c_source
    assert products.memory_plan == separate.memory_plan
    assert products.weights.tobytes() == separate.weights.tobytes()
    assert products.metadata == separate.metadata
    assert products.library == separate.library


def test_the_shared_analysis_follows_the_objects_it_was_made_from(ctx):
    lowered = compiled(layered_model())
    other = compiled(layered_model(layers=2))
    kernel = next(gv for gv, func in lowered.items() if isinstance(func, PrimFunc))
    changed_kernel = lowered.copy()
    changed_kernel[kernel] = lowered[kernel].with_attr("note", 1)  # a new object, same signature
    with shared_host_analysis():
        before = counter("host_analyses")
        first = host_program(lowered)
        assert host_program(lowered.copy()) is first  # same functions: reused
        assert counter("host_analyses") - before == 1
        assert host_program(other) is not first  # another main: analyzed
        assert host_program(changed_kernel) is not first  # a kernel object changed: analyzed
        assert counter("host_analyses") - before == 3
        again = host_program(lowered)
    assert again is not first  # only the latest analysis is kept
    assert again == first == analyze_main(lowered)
    # outside a block nothing is shared
    before = counter("host_analyses")
    host_program(lowered)
    host_program(lowered)
    assert counter("host_analyses") - before == 2


def test_a_pass_between_plan_and_host_that_replaces_main_gets_a_fresh_analysis(ctx):
    lowered = compiled(layered_model())
    smaller = compiled(layered_model(layers=1))

    def swap_main(mod, _ctx):
        mod["main"] = smaller["main"]
        for gv, func in smaller.items():
            mod[gv] = func
        return mod

    from passinfra.transform import module_pass

    swap = module_pass(swap_main, opt_level=0, name="SwapMain")
    with collect_link_products() as products, shared_host_analysis():
        before = counter("host_analyses")
        Sequential([PlanMemory(), swap, HostCodegen()])(lowered)
        assert counter("host_analyses") - before == 2
    program = analyze_main(smaller)
    # the host is the smaller model's (its own analysis), with the plan PlanMemory made
    assert products.host.c_source == render_host(
        program, products.memory_plan, pack_weights(program.weights)[1]
    )


# ----- memory planning ----------------------------------------------------------------------------
def lifetimes(program: HostProgram) -> tuple[dict[int, int], dict[int, int]]:
    from passinfra.codegen.host import tensor_lifetimes

    return tensor_lifetimes(program)


def slot(program: HostProgram, t: int) -> int:
    return -(-max(program.tensors[t].nbytes, 1) // ALIGNMENT) * ALIGNMENT


def step_by_step_plan(program: HostProgram) -> MemoryPlan:
    """The planner as it was: a tensor's conflicts gathered from every step of its
    lifetime (a placed tensor seen once per shared step)."""
    tensors = workspace_tensors(program)
    first, last = lifetimes(program)
    size_of = {t: slot(program, t) for t in tensors}
    live_at: list[list[int]] = [[] for _ in program.calls]
    offsets: dict[int, int] = {}
    for t in sorted(tensors, key=lambda t: (-size_of[t], first[t], t)):
        conflicts = sorted(
            {(offsets[o], size_of[o]) for step in range(first[t], last[t] + 1) for o in live_at[step]}
        )
        offset = 0
        for other_offset, other_size in conflicts:
            if offset + size_of[t] <= other_offset:
                break
            offset = max(offset, other_offset + other_size)
        offsets[t] = offset
        for step in range(first[t], last[t] + 1):
            live_at[step].append(t)
    peak = max((offsets[t] + size_of[t] for t in tensors), default=0)
    return MemoryPlan(offsets, peak, sum(program.tensors[t].nbytes for t in tensors))


def random_program(rng: random.Random, calls: int, keep: int) -> HostProgram:
    """Kernel calls reading random earlier values; ``keep`` bounds how many stay readable
    (a large one makes long lifetimes)."""
    program = HostProgram()
    x = program.add_tensor("input", (4,), F32, 0)
    program.input_ids.append(x)
    program.input_names.append("x")
    readable = [x]
    for i in range(calls):
        args = tuple(rng.sample(readable, min(len(readable), rng.randint(1, 3))))
        outputs = tuple(
            program.add_tensor("intermediate", (rng.choice([1, 3, 16, 17, 64, 200]),), F32, 2 * i + j)
            for j in range(rng.randint(1, 2))
        )
        program.calls.append(KernelCall("k", args, outputs))
        readable += outputs
        if len(readable) > keep and rng.random() < 0.5:
            readable.pop(rng.randrange(1, len(readable)))
    program.result = tuple(readable[-2:]) if len(readable) > 2 else x
    return program


def concat_of_early_results(n: int) -> HostProgram:
    """n kernels on the input, then one kernel reading all n results: n tensors live
    together until the end (each of the n lifetimes overlaps every other)."""
    program = HostProgram()
    x = program.add_tensor("input", (16,), F32, 0)
    program.input_ids.append(x)
    program.input_names.append("x")
    results = []
    for i in range(n):
        results.append(program.add_tensor("intermediate", (16 + i % 7,), F32, i))
        program.calls.append(KernelCall("k", (x,), (results[-1],)))
    out = program.add_tensor("intermediate", (16,), F32, n)
    program.calls.append(KernelCall("concat", tuple(results), (out,)))
    program.result = out
    return program


def overlapping_pairs(program: HostProgram) -> int:
    """For each tensor in placement order, how many placed ones its lifetime overlaps."""
    tensors = workspace_tensors(program)
    first, last = lifetimes(program)
    placed: list[int] = []
    total = 0
    for t in sorted(tensors, key=lambda t: (-slot(program, t), first[t], t)):
        total += sum(1 for o in placed if first[o] <= last[t] and first[t] <= last[o])
        placed.append(t)
    return total


def test_memory_plans_are_those_of_the_step_by_step_planner(ctx):
    rng = random.Random(0)
    for _ in range(300):
        program = random_program(rng, rng.randint(0, 150), rng.choice([4, 12, 40, 200]))
        assert plan_memory(program) == step_by_step_plan(program)
    program = concat_of_early_results(120)
    assert plan_memory(program) == step_by_step_plan(program)
    lowered = compiled(layered_model(layers=6))
    assert plan_memory(analyze_main(lowered)) == step_by_step_plan(analyze_main(lowered))


@pytest.mark.parametrize("n", [50, 400])
def test_planning_examines_each_overlapping_tensor_once(n):
    program = concat_of_early_results(n)
    before = counter("plan_memory_candidates")
    plan_memory(program)
    examined = counter("plan_memory_candidates") - before
    # each placed tensor a lifetime overlaps, once: n(n-1)/2 here, where the step-by-step
    # planner looked at each one once per shared step (about n^3/6)
    assert examined == overlapping_pairs(program)
    assert examined <= n * n


# ----- the weights blob ---------------------------------------------------------------------------
def test_pack_weights_is_byte_for_byte_the_padded_concatenation():
    rng = np.random.default_rng(1)
    transposed = rng.standard_normal((3, 5)).astype(F32).T  # not C-contiguous
    weights = [
        rng.standard_normal(7).astype(F32),
        np.array(2.5, dtype="float64"),  # 0-d
        np.zeros((0, 4), dtype=F32),  # empty
        transposed,
        np.array([True, False, True]),
        np.arange(5, dtype=">i4"),  # non-native byte order: its own bytes, as tobytes gives them
        rng.integers(-9, 9, size=(2, 2, 3)).astype("int64"),
    ]
    blob, offsets = pack_weights(weights)
    expected_blob, expected_offsets = reference_weights(weights)
    assert blob.tobytes() == expected_blob and offsets == expected_offsets
    assert all(offset % ALIGNMENT == 0 for offset in offsets)
    assert b"".join(blob.chunks()) == expected_blob and blob.nbytes == len(expected_blob)
    # a layout, not a copy: C-contiguous weights are the constants' own arrays
    for original, held in zip(weights, blob.arrays):
        assert (held is original) == bool(original.flags.c_contiguous)
    empty, no_offsets = pack_weights([])
    assert empty.tobytes() == b"" and no_offsets == []


def test_the_link_products_are_the_public_pieces_composed(ctx):
    mod = layered_model(layers=4)
    lowered = compiled(mod)
    products = run_link(lowered, infer_type(mod["main"], mod).ret_type)
    program = analyze_main(lowered)
    plan = plan_memory(program)
    blob, offsets = reference_weights(program.weights)
    assert products.memory_plan == plan
    assert products.weights.tobytes() == blob
    assert products.host.c_source == render_host(program, plan, offsets)
    assert products.metadata["weights_bytes"] == len(blob)


# ----- build: store while loading -------------------------------------------------------------------
def test_build_stores_while_loading_and_both_are_done_when_it_returns(ctx):
    mod = layered_model()
    x = np.random.default_rng(2).standard_normal((2, 8)).astype(F32)
    writes, hits = counter("build_writes"), counter("build_hits")
    first = passinfra.build(mod)
    assert counter("build_writes") - writes == 1  # stored before build returned
    second = passinfra.build(mod)
    assert counter("build_hits") - hits == 1
    assert first.library_bytes == second.library_bytes
    expected = passinfra.evaluate(mod, x)
    for lib in (first, second):
        for got, want in zip(lib(x), expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class StoreFailed(OSError):
    pass


class LoadFailed(RuntimeError):
    pass


def test_a_failed_store_is_reported_first(ctx, monkeypatch):
    def failing_store(*args):
        raise StoreFailed("disk full")

    def failing_load(*args):
        raise LoadFailed("cannot load")

    monkeypatch.setattr(build_module, "store_build", failing_store)
    monkeypatch.setattr(build_module, "Module", failing_load)
    with pytest.raises(StoreFailed, match="disk full"):
        passinfra.build(layered_model())


def test_a_failed_load_is_reported_after_the_store_finished(ctx, monkeypatch):
    def failing_load(*args):
        raise LoadFailed("cannot load")

    monkeypatch.setattr(build_module, "Module", failing_load)
    writes = counter("build_writes")
    with pytest.raises(LoadFailed, match="cannot load"):
        passinfra.build(layered_model())
    assert counter("build_writes") - writes == 1
    monkeypatch.setattr(build_module, "Module", Module)
    hits = counter("build_hits")
    passinfra.build(layered_model())  # the stored entry is whole and served
    assert counter("build_hits") - hits == 1


def test_a_build_without_the_cache_loads_directly(tmp_path, monkeypatch):
    started = []
    real = build_module._load_while_storing
    monkeypatch.setattr(build_module, "_load_while_storing", lambda *args: started.append(1) or real(*args))
    config = {"codegen.cache_dir": str(tmp_path / "cache"), "codegen.build_cache": False}
    with PassContext(config=config):
        passinfra.build(layered_model())
    assert not started
