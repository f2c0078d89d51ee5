"""What functions cost in earlier builds orders the next build's work queue."""

from __future__ import annotations

import json

from passinfra import ir
from passinfra.transform import PassContext, Sequential
from scheduler import function_costs, pool
from scheduler.function_costs import CostMemory, function_key
from scheduler.residency import Residency
from tests.scheduler import passes_for_tests as P

PASSES = ("LowerToPrimFunc", "CompileC")


def _costs_file():
    return pool.pool_dir() / function_costs.FILE_NAME


def test_a_build_finds_what_an_earlier_one_measured_for_the_same_function():
    _costs_file().unlink(missing_ok=True)
    functions = {gv.name_hint: func for gv, func in P.chain_module(12).items()}
    # another model's functions of the same names, of other shapes
    other = {name: ir.Function([x := ir.var("x", (8,))], ir.op.add(x, x)) for name in functions}
    first = CostMemory()
    assert first.prior(PASSES, functions) == {}
    first.measured(PASSES, {"f0": 0.2, "f1": 0.05, "f2": 0.01}, cached={"f2"})  # f2: a cache hit
    first.save()
    second = CostMemory()
    assert second.prior(PASSES, functions) == {"f0": 0.2, "f1": 0.05}
    assert second.prior(("LowerToPrimFunc",), functions) == {}  # another stage
    assert second.prior(PASSES, other) == {}
    assert second.prior(PASSES, {"f0": functions["f0"]}) == {}  # too few functions to order
    assert function_key(PASSES, "f0", functions["f0"]) in json.loads(_costs_file().read_text())


def test_the_queue_takes_the_remembered_costs_before_the_node_counts():
    mod = P.chain_module(10)
    names = [gv.name_hint for gv in mod.functions]
    by_nodes = Residency(2).sync(mod, names, queue=True).queued
    prior = {name: 0.01 * (i + 1) for i, name in enumerate(names)}  # the last the slowest
    remembered = Residency(2).sync(mod, names, queue=True, prior=prior).queued
    assert remembered == names[::-1] != by_nodes


def test_a_run_on_workers_remembers_its_stages_functions(ray_scheduler):
    _costs_file().unlink(missing_ok=True)
    mod = P.chain_module(12)
    with PassContext(opt_level=3):
        ray_scheduler(2).run(Sequential([P.add_to_multiply, P.identity], opt_level=0), mod)
    remembered = json.loads(_costs_file().read_text())
    assert len(remembered) == 12 and all(value > 0 for value in remembered.values())
    assert {key.split("|")[0] for key in remembered} == {"AddToMultiply/Identity"}  # the stage's passes
    assert {key.split("|")[1] for key in remembered} == {f"f{i}" for i in range(12)}
