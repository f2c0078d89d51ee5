"""The worker and the wire format, without Ray: residency, typing ahead of InferType, buffers."""

from __future__ import annotations

import numpy as np

from passinfra import ir
from passinfra.ir import op
from passinfra.transform import PassContext
from tests.scheduler import passes_for_tests as P
from workers.actor import FunctionWorker, StageSpec
from workers.wire import OUT_OF_BAND_BYTES, pack_functions, packed_size, unpack_functions


def _spec(types_wanted: bool) -> StageSpec:
    return StageSpec(1, [(0, P.add_to_multiply)], PassContext().to_spec(), types_wanted=types_wanted)


def _functions(mod: ir.IRModule) -> dict:
    return {gv.name_hint: func for gv, func in mod.items()}


def test_a_batch_loads_and_drops_before_it_runs():
    worker = FunctionWorker(0)
    functions = _functions(P.chain_module(4))
    first = pack_functions({n: functions[n] for n in ("f0", "f1")})
    worker.run_batch("r1", [_spec(False)], ["f0", "f1"], first)
    result = worker.run_batch("r1", [_spec(False)], ["f2"], pack_functions({"f2": functions["f2"]}), ["f0"])
    assert worker.resident("r1") == ["f1", "f2"]
    assert set(unpack_functions(result.changed)) == {"f2"}


def test_runs_keep_their_functions_apart_and_end_run_evicts_them():
    worker = FunctionWorker(0)
    mine, theirs = _functions(P.chain_module(2)), _functions(P.chain_module(3))
    worker.run_batch("a", [_spec(False)], ["f0", "f1"], pack_functions(mine))
    worker.run_batch("b", [_spec(False)], ["f2"], pack_functions({"f2": theirs["f2"]}))
    assert worker.resident("a") == ["f0", "f1"] and worker.resident("b") == ["f2"]
    assert sorted(worker.runs()) == ["a", "b"]
    assert worker.end_run("a") == 2 and worker.runs() == ["b"]
    assert worker.end_run("a") == 0  # ending twice (or a run never seen) is harmless


def test_the_wire_form_of_a_batch_is_the_same_call_in_bytes():
    import pickle

    worker = FunctionWorker(0)
    functions = _functions(P.chain_module(2))
    request = pickle.dumps((list(functions), pack_functions(functions), None))
    result = pickle.loads(worker.run_batch_wire("w", [_spec(False)], request))
    direct = FunctionWorker(0).run_batch("w", [_spec(False)], list(functions), pack_functions(functions))
    assert result.changed == direct.changed and [r.function for r in result.runs] == ["f0", "f1"]


def test_results_come_back_typed_when_infer_type_follows():
    worker = FunctionWorker(0)
    functions = _functions(P.chain_module(3))
    result = worker.run_batch("r1", [_spec(True)], list(functions), pack_functions(functions))
    back = unpack_functions(result.changed)
    assert all(func._checked_type is not None for func in back.values())  # the types travel
    assert result.untyped == [] and result.typing_seconds > 0.0
    untyped = worker.run_batch("r1", [_spec(False)], ["f0"], pack_functions({"f0": functions["f0"]}))
    assert unpack_functions(untyped.changed)["f0"]._checked_type is None  # only when asked


def test_a_caller_without_its_callee_is_left_untyped_and_named():
    worker = FunctionWorker(0)
    functions = _functions(P.calling_module(2))
    callers = {name: functions[name] for name in ("caller0", "caller1")}  # no helper here
    result = worker.run_batch("r1", [_spec(True)], list(callers), pack_functions(callers))
    assert result.error is None  # typing is an optimization: its failure is not the pass's
    assert result.untyped == ["caller0", "caller1"]


def test_small_constants_travel_in_the_payload_large_ones_beside_it():
    x = ir.var("x", (4,))
    large = np.arange(OUT_OF_BAND_BYTES // 4, dtype="float32")
    func = ir.Function([x], op.add(op.add(x, ir.const(1.0)), op.sum(ir.const(large))))
    payload, buffers = packed = pack_functions({"f": func, "g": func})
    assert [b.nbytes for b in buffers] == [large.nbytes]  # sent once, out-of-band
    assert packed_size(packed) == len(payload) + large.nbytes
    back = unpack_functions(packed)
    assert back["f"] is back["g"]
    ir.assert_structural_equal(back["f"], func)


def test_a_function_changed_since_it_was_sent_is_placed_afresh():
    """A slot's out-of-date copy is sent again wherever the function runs, so the next
    stage places it like a new one (the work queue, when on) and its slot drops the copy;
    the functions still up to date stay where they are and are not sent."""
    from scheduler.residency import Residency

    for queue in (True, False):
        mod = P.chain_module(12)
        names = [gv.name_hint for gv in mod.functions if gv.name_hint != "main"]
        residency = Residency(2)
        before = residency.sync(mod, names)
        assert sum(len(sent) for sent in before.sends.values()) == len(names)
        changed = names[::3]  # a module pass rewrote these between the stages
        for name in changed:
            mod[name] = mod[name].with_attr("rewritten", True)
        placement = residency.sync(mod, names, queue=queue)
        assert all(placement.slots[name] == before.slots[name] for name in names if name not in changed)
        assert sorted(name for dropped in placement.drops.values() for name in dropped) == sorted(changed)
        sent = sorted(name for functions in placement.sends.values() for name in functions)
        if queue:  # taken from the queue by whichever slot is free: sent then
            assert sorted(placement.queued) == sorted(changed) and not sent
            assert not set(changed) & set(placement.slots)
        else:  # placed ahead by LPT: each sent once, to the slot placed on
            assert sent == sorted(changed)


def test_rebalancing_moves_functions_only_when_it_saves_more_than_sending_costs():
    """Measured costs that make the placement 3x worse than LPT's move functions when the
    gain is real (seconds), not when the functions take a tenth of a millisecond (noise)."""
    from scheduler.assign import lpt, makespan
    from scheduler.residency import REBALANCE_THRESHOLD, Residency

    mod = P.chain_module(12)
    names = [gv.name_hint for gv in mod.functions if gv.name_hint != "main"]
    for unit, expect_moves in [(1e-4, False), (1.0, True)]:
        residency = Residency(2)
        first = residency.sync(mod, names).slots
        # the first slot's functions turn out to cost 5x the other's
        costs = {name: unit * (5 if first[name] == 0 else 1) for name in names}
        residency.learn(costs)
        # the ratio alone says move, in both cases
        assert makespan(first, costs, 2) > REBALANCE_THRESHOLD * makespan(lpt(costs, [0.0, 0.0]), costs, 2)
        placement = residency.sync(mod, names)
        assert (placement.moved > 0) is expect_moves, (unit, placement.moved)
        assert sum(len(sent) for sent in placement.sends.values()) == placement.moved
