"""``tune(mod, trials, db)``: search each kernel's schedule space, measuring candidates on
worker processes in parallel, and record the fastest in a tuning database.

1. The model goes through the compile pipeline up to FuseOps: its kernels are the
   primitive functions (distinct by :func:`~passinfra.tuning.database.kernel_key`; those
   with symbolic sizes and those the database already has for this target are left out).
2. Each kernel becomes a one-kernel module: ``main`` calls it with the weights of its
   first call in the model (so PanelWeights treats them as in the model) and random
   inputs for the rest. A candidate is that module with the candidate as the kernel's
   ``Schedule``, built (``passinfra.build``) and timed in a worker process pinned to its
   own CPUs, with the library on as many threads as the worker has CPUs: a few warm-up
   calls, then blocks of calls of at least :data:`BLOCK_SECONDS`, the median block's
   time per call.
3. The rules' point of every kernel is measured first; the other trials go to kernels by
   their share of the model's time (kernel time x calls), each kernel's candidates drawn
   from its space (:func:`~passinfra.tuning.space.candidates`). Timings of different
   workers are compared only after the finalists (the rules' point and the best) are
   measured again, built once and timed in interleaved rounds in one worker (the kernels
   on all workers at once): a schedule is recorded as better only when that re-measure
   agrees (by at least :data:`MIN_GAIN`).
4. Kernels are chosen alone; the model is then built twice in one worker, with the
   rules' schedules and with every chosen one, and timed in interleaved rounds: choices
   that together make the model slower are not recorded (``TuneResult.model_check``).

Ctrl-C keeps what was measured: the records of finished kernels are saved before it
propagates. Where this runs: a :class:`~passinfra.tuning.runner.Runner`'s slots, one job
each at a time: worker processes of this machine (``workers``) or Ray actors
(``scheduler.tuning.RayRunner``). A worker that dies loses only the job it was running,
which is run again on a fresh worker. The target recorded is the workers' instruction
set and the threads each gave its library.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from passinfra.ir.expr import Call, Constant, Function, GlobalVar, var
from passinfra.ir.functor import iter_post_order
from passinfra.ir.module import IRModule
from passinfra.ir.types import TensorType
from passinfra.transform.context import PassContext
from passinfra.transform.schedule import SCHEDULE_ATTR
from passinfra.tuning.database import TuningDatabase, TuningRecord, kernel_key
from passinfra.tuning.runner import MAX_LOSSES, WORKER_SETTINGS, JobRun, ProcessRunner, Runner
from passinfra.tuning.space import Schedule, all_points, candidates, schedule_text

# a timed block of calls lasts at least this long; the median of BLOCKS blocks is the time
BLOCK_SECONDS = 0.01
BLOCKS = 7
WARMUP_CALLS = 3
# a schedule replaces the rules' choice when the re-measure finds it this much faster
MIN_GAIN = 0.03


@dataclass
class KernelTask:
    """One kernel to tune: its one-kernel module and what the search needs of it."""

    name: str
    key: str
    module: IRModule  # main calls the kernel; the kernel carries no schedule
    calls: int  # calls of it in the model
    space: int  # points in its space
    default: Schedule
    times: dict[Schedule, float] = field(default_factory=dict)
    measured: int = 0  # candidates timed on the workers


@dataclass
class TuneResult:
    """What ``tune`` did: per kernel, candidates measured and the speedup recorded."""

    kernels: list[dict[str, Any]] = field(default_factory=list)
    measured: int = 0
    planned: int = 0  # candidates the search sent to the workers (measured unless interrupted or given up)
    seconds: float = 0.0
    skipped_known: int = 0  # kernels the database had for this target
    skipped_symbolic: int = 0  # kernels with symbolic sizes (not tuned)
    interrupted: bool = False
    # per worker process (by pid): candidates it measured and its busy seconds
    workers: dict[int, dict[str, float]] = field(default_factory=dict)
    lost_workers: int = 0  # workers that died under a job (replaced; the job re-run)
    given_up: int = 0  # jobs whose worker died MAX_LOSSES times under them
    not_started: int = 0  # candidates the time budget left unmeasured
    # every job as a worker ran it (the tuning trace): kernel, kind (candidate, re-measure or
    # model check), schedules, their seconds per call, slot, pid, start (time.time()), seconds
    jobs: list[dict[str, Any]] = field(default_factory=list)
    # the whole model timed with the tuned kernels against the rules' (seconds per call:
    # rules, tuned), how many kernels changed, and whether their records were kept
    model_check: dict[str, Any] = field(default_factory=dict)


def fused_module(mod: IRModule, opt_level: int = 3) -> IRModule:
    """``mod`` after the compile pipeline's passes up to and including FuseOps."""
    from passinfra.build import COMPILE_PIPELINE, _passes
    from passinfra.transform.sequential import Sequential

    names = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("FuseOps") + 1]
    with PassContext(opt_level=opt_level, config=dict(PassContext.current().config)):
        return Sequential(_passes(names), opt_level=0)(mod)


def kernel_tasks(fused: IRModule) -> tuple[list[KernelTask], int]:
    """The distinct static kernels of ``fused`` (in the order main first calls them) as
    one-kernel modules, and how many symbolic ones were left out."""
    calls = [node for node in iter_post_order(fused["main"].body)
             if isinstance(node, Call) and isinstance(node.op, GlobalVar)]
    tasks: dict[str, KernelTask] = {}
    symbolic = set()
    for call in calls:
        func = fused[call.op]
        if not (isinstance(func, Function) and func.attrs.get("Primitive", 0)):
            continue
        key = kernel_key(func)
        if key in tasks:
            tasks[key].calls += 1
            continue
        types = [p.type_annotation for p in func.params]
        if not all(isinstance(t, TensorType) and t.is_static for t in types):
            symbolic.add(key)
            continue
        params, args = [], []
        for param, arg in zip(func.params, call.args):
            if isinstance(arg, Constant):
                args.append(arg)
            else:
                fresh = var(param.name_hint, param.type_annotation.shape, param.type_annotation.dtype)
                params.append(fresh)
                args.append(fresh)
        gv = GlobalVar(call.op.name_hint)
        module = IRModule({gv: func, GlobalVar("main"): Function(params, Call(gv, args))})
        tasks[key] = KernelTask(call.op.name_hint, key, module, 1, len(all_points(func)),
                                candidates(func, 1)[0])
    return list(tasks.values()), len(symbolic)


def _inputs(module: IRModule) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = []
    for param in module["main"].params:
        ty = param.type_annotation
        if ty.dtype.startswith("float") or ty.dtype == "bfloat16":
            arrays.append(rng.standard_normal(ty.shape).astype(ty.dtype))
        elif ty.dtype == "bool":
            arrays.append(rng.integers(0, 2, ty.shape).astype(bool))
        else:
            arrays.append(rng.integers(0, 4, ty.shape).astype(ty.dtype))
    return arrays


def scheduled(module: IRModule, schedule: Schedule) -> IRModule:
    """The one-kernel module with its kernel under ``schedule``."""
    out = module.copy()
    for gv, func in module.items():
        if gv.name_hint != "main":
            out.update_func(gv, func.with_attr(SCHEDULE_ATTR, schedule))
    return out


def _build(module: IRModule, schedule: Schedule, threads: int, cache_dir: str | None) -> Any:
    from passinfra.build import build

    config: dict[str, Any] = {"codegen.build_cache": False, "codegen.num_threads": threads}
    if cache_dir:
        config["codegen.cache_dir"] = cache_dir
    with PassContext(opt_level=3, config=config):
        return build(scheduled(module, schedule))


def _time_calls(lib: Any, arrays: list[np.ndarray]) -> float:
    """Seconds per call: warm-up calls, then the median of BLOCKS blocks of calls, each
    at least BLOCK_SECONDS long."""
    for _ in range(WARMUP_CALLS):
        lib(*arrays)
    count, start = 1, time.perf_counter()
    lib(*arrays)
    while time.perf_counter() - start < BLOCK_SECONDS / 4:
        count *= 2
        start = time.perf_counter()
        for _ in range(count):
            lib(*arrays)
    per_block = max(1, math.ceil(count * BLOCK_SECONDS / max(time.perf_counter() - start, 1e-9)))
    blocks = []
    for _ in range(BLOCKS):
        start = time.perf_counter()
        for _ in range(per_block):
            lib(*arrays)
        blocks.append((time.perf_counter() - start) / per_block)
    return float(np.median(blocks))


def measure(module: IRModule, schedule: Schedule, threads: int, cache_dir: str | None = None) -> float:
    """Seconds per call of the one-kernel ``module`` built under ``schedule`` on
    ``threads`` threads (module docstring)."""
    return _time_calls(_build(module, schedule, threads, cache_dir), _inputs(module))


def compare(module: IRModule, points: list[Schedule], threads: int, cache_dir: str | None = None,
            rounds: int = 3) -> list[float]:
    """Seconds per call of each of ``points``, built once each and timed in interleaved
    rounds in this process (medians): times that compare with each other."""
    libs = [_build(module, point, threads, cache_dir) for point in points]
    arrays = _inputs(module)
    times: list[list[float]] = [[] for _ in points]
    for _ in range(rounds):
        for index, lib in enumerate(libs):
            times[index].append(_time_calls(lib, arrays))
    return [float(np.median(t)) for t in times]


# ----- jobs, run in a worker (runner.in_worker) ----------------------------------------
def _measure_job(module: IRModule, schedule: Schedule) -> float:
    return measure(module, schedule, WORKER_SETTINGS["threads"], WORKER_SETTINGS["cache_dir"])


def _compare_job(module: IRModule, points: list[Schedule]) -> list[float]:
    return compare(module, points, WORKER_SETTINGS["threads"], WORKER_SETTINGS["cache_dir"])


def tune(mod: IRModule, trials: int, db_path: str, workers: int = 1, cache_dir: str | None = None,
         report: Callable[[str], None] | None = None, runner: Runner | None = None,
         minutes: float | None = None, cpus_per_worker: int | None = None) -> TuneResult:
    """Tune ``mod``'s kernels with ``trials`` candidates in all (at least the rules' point
    of each kernel); records go to the database ``db_path``. Candidates are measured by
    ``runner`` (``scheduler.tuning.RayRunner``: Ray actors; the caller closes it) or else
    on ``workers`` processes of this machine, each on its share of the CPUs or pinned to
    ``cpus_per_worker`` of its own. With ``minutes``, the search starts no
    candidate once the time left is what the re-measure of the finalists needs (the rules'
    points are measured whatever the budget)."""
    say = report or (lambda _line: None)
    started = time.perf_counter()
    deadline = None if minutes is None else time.monotonic() + minutes * 60
    owned = runner is None
    runner = ProcessRunner(workers, cache_dir, cpus_per_worker) if runner is None else runner
    interrupted = False
    try:
        # the kernels' C runtime, compiled once here (in the background while the model is
        # fused) into the cache the workers build with: N workers with a fresh cache would
        # otherwise each compile it at their first candidate, at once
        runtime = _start_runtime_compile(cache_dir)
        target = runner.target()
        database = TuningDatabase.load(db_path)
        tasks, symbolic = kernel_tasks(fused_module(mod))
        runtime.result()
        result = TuneResult(skipped_symbolic=symbolic)
        known = [t for t in tasks if database.lookup(t.key, target) is not None]
        tasks = [t for t in tasks if database.lookup(t.key, target) is None]
        result.skipped_known = len(known)
        say(f"{len(tasks)} kernels to tune ({len(known)} already recorded for {target['isa']}, "
            f"{target['threads']} threads; {symbolic} with symbolic sizes left out), "
            f"{runner.slots} worker(s)")
        try:
            _search(tasks, trials, runner, result, say, deadline)
            _confirm(tasks, runner, result, say)
            _check_model(mod, tasks, target, runner, result, say)
        except KeyboardInterrupt:
            result.interrupted = interrupted = True
            say("interrupted: keeping what was measured")
            raise
        finally:
            result.lost_workers = runner.lost_workers
            for task in tasks:
                if task.times:
                    _record(task, database, target, result)
            database.save(db_path)
            result.seconds = time.perf_counter() - started
    finally:
        if owned and interrupted:  # after Ctrl-C, the jobs in flight are stopped, not waited for
            runner.abort()
        elif owned:
            runner.close()
    return result


def _start_runtime_compile(cache_dir: str | None) -> Any:
    from passinfra.codegen.cc_driver import CompilerSettings
    from passinfra.codegen.conv_runtime import start_runtime_compile

    config = dict(PassContext.current().config)
    if cache_dir:
        config["codegen.cache_dir"] = cache_dir
    with PassContext(config=config):
        return start_runtime_compile(CompilerSettings.from_context())


def _log(result: TuneResult, task: KernelTask, kind: str, points: list[Schedule], times: list[float],
         run: JobRun) -> None:
    worker = result.workers.setdefault(run.pid, {"candidates": 0, "busy_seconds": 0.0})
    worker["candidates"] += len(points) if kind == "candidate" else 0
    worker["busy_seconds"] += run.seconds
    result.jobs.append({"kernel": task.name, "kind": kind, "schedules": [schedule_text(p) for p in points],
                        "seconds_per_call": times, "slot": run.slot, "pid": run.pid, "start": run.start,
                        "seconds": run.seconds})


def _run(runner: Runner, jobs: list[tuple[KernelTask, Schedule]], result: TuneResult,
         say: Callable[[str], None], deadline: float | None = None) -> None:
    def done(index: int, seconds: float, run: JobRun) -> None:
        task, point = jobs[index]
        _log(result, task, "candidate", [point], [seconds], run)
        task.times[point] = seconds
        task.measured += 1
        result.measured += 1
        best = min(task.times.values())
        say(f"[{result.measured}] {task.name}: {schedule_text(point)} {seconds * 1e6:.1f} us "
            f"(best {task.times[task.default] / best if task.default in task.times else 1:.2f}x the rules')")

    arguments = [(task.module, point) for task, point in jobs]
    lost, not_started = runner.run(_measure_job, arguments, done, deadline)
    result.planned += len(jobs) - len(not_started)
    if not_started:
        result.not_started += len(not_started)
        say(f"time budget reached: {len(not_started)} candidates not measured")
    for index in lost:
        task, point = jobs[index]
        result.given_up += 1
        say(f"{task.name}: {schedule_text(point)} given up: its worker died {MAX_LOSSES} times under it")


def _search(tasks: list[KernelTask], trials: int, runner: Runner, result: TuneResult,
            say: Callable[[str], None], deadline: float | None = None) -> None:
    if not tasks:
        return
    _run(runner, [(task, task.default) for task in tasks], result, say)
    # a kernel whose rules' point was given up (it killed its worker) is not searched
    tasks[:] = [task for task in tasks if task.default in task.times]
    extra = max(0, trials - len(tasks))
    total = sum(task.times[task.default] * task.calls for task in tasks) or 1.0
    ranked = []  # (place in the queue, task, point)
    for task in tasks:
        share = task.times[task.default] * task.calls / total
        count = min(task.space, 1 + round(extra * share))
        func = next(f for gv, f in task.module.items() if gv.name_hint != "main")
        points = candidates(func, count)[1:]
        # each kernel's candidates spread evenly over the queue, so that a time budget
        # that cuts it short leaves every kernel its share of what was measured
        ranked += [((rank + 1) / len(points), task.name, task, point) for rank, point in enumerate(points)]
    ranked.sort(key=lambda item: item[:2])
    if deadline is not None and result.jobs:
        # keep back what re-measuring the finalists takes: two builds and three rounds of
        # timing each, about four candidate jobs, per kernel and worker
        job_seconds = sum(job["seconds"] for job in result.jobs) / len(result.jobs)
        deadline -= 4 * job_seconds * math.ceil(len(tasks) / runner.slots)
    _run(runner, [(task, point) for _, _, task, point in ranked], result, say, deadline)


def _confirm(tasks: list[KernelTask], runner: Runner, result: TuneResult, say: Callable[[str], None]) -> None:
    """Measure the rules' point and the best again, interleaved in one worker per kernel
    (the kernels in parallel); keep the best only where the re-measure agrees."""
    finalists = [(task, min(task.times, key=task.times.get)) for task in tasks]
    finalists = [(task, best) for task, best in finalists if best != task.default]

    def done(index: int, times: list[float], run: JobRun) -> None:
        task, best = finalists[index]
        _log(result, task, "re-measure", [task.default, best], times, run)
        default_s, best_s = times
        if best_s < default_s * (1 - MIN_GAIN):
            task.times = {task.default: default_s, best: best_s}
        else:
            task.times = {task.default: default_s}
            say(f"{task.name}: {schedule_text(best)} not faster on a re-measure; the rules' point stays")

    arguments = [(task.module, [task.default, best]) for task, best in finalists]
    lost, _ = runner.run(_compare_job, arguments, done)
    for index in lost:  # not confirmed: the rules' point stays
        task, best = finalists[index]
        task.times = {task.default: task.times[task.default]}
        result.given_up += 1


def _model_job(mod: IRModule, records: list[dict[str, Any]], rounds: int = 5) -> list[float]:
    """Seconds per call of the whole model built with the rules' schedules and with
    ``records`` applied (a database written here), in interleaved rounds (medians)."""
    import tempfile

    from passinfra.build import build

    with tempfile.TemporaryDirectory(prefix="raypass-tune-check-") as tmp:
        path = os.path.join(tmp, "db.json")
        TuningDatabase([TuningRecord(**record) for record in records]).save(path)
        libs = []
        for tuning_db in ("", path):
            config: dict[str, Any] = {"codegen.build_cache": False, "codegen.tuning_db": tuning_db,
                                      "codegen.num_threads": WORKER_SETTINGS["threads"]}
            if WORKER_SETTINGS["cache_dir"]:
                config["codegen.cache_dir"] = WORKER_SETTINGS["cache_dir"]
            with PassContext(opt_level=3, config=config):
                libs.append(build(mod))
    arrays = _inputs(mod)
    times: list[list[float]] = [[], []]
    for _ in range(rounds):
        for index, lib in enumerate(libs):
            times[index].append(_time_calls(lib, arrays))
    return [float(np.median(t)) for t in times]


def _check_model(mod: IRModule, tasks: list[KernelTask], target: dict[str, Any], runner: Runner,
                 result: TuneResult, say: Callable[[str], None]) -> None:
    """Each kernel's choice was timed on the kernel alone; the model is timed with all of
    them against the rules' (in one worker, interleaved). Choices that together make the
    model slower are not recorded: the rules' points stay."""
    changed = [task for task in tasks if min(task.times, key=task.times.get) != task.default]
    if not changed:
        return
    records = []
    for task in changed:
        best = min(task.times, key=task.times.get)
        records.append({"kernel": task.key, "name": task.name, "target": target,
                        "schedule": [list(item) for item in best], "seconds": task.times[best],
                        "default_seconds": task.times[task.default], "candidates": task.measured})
    outcome: dict[str, float] = {}

    def done(index: int, times: list[float], run: JobRun) -> None:
        outcome.update(rules=times[0], tuned=times[1])
        result.jobs.append({"kernel": "(the model)", "kind": "model check", "schedules": ["rules", "tuned"],
                            "seconds_per_call": times, "slot": run.slot, "pid": run.pid, "start": run.start,
                            "seconds": run.seconds})

    lost, _ = runner.run(_model_job, [(mod, records)], done)
    if lost or not outcome:
        return
    kept = outcome["tuned"] <= outcome["rules"]
    result.model_check = {**outcome, "kernels": len(changed), "kept": kept}
    ratio_text = f"{outcome['tuned'] / outcome['rules']:.3f}x"
    if kept:
        say(f"the model with the {len(changed)} tuned kernels runs {ratio_text} its rules' time")
        return
    say(f"the model with the {len(changed)} tuned kernels ran {ratio_text} its rules' time: the rules' "
        "schedules are kept")
    for task in changed:
        task.times = {task.default: task.times[task.default]}


def _record(task: KernelTask, database: TuningDatabase, target: dict[str, Any], result: TuneResult) -> None:
    best = min(task.times, key=task.times.get)
    default_s = task.times.get(task.default, task.times[best])
    database.add(TuningRecord(task.key, task.name, target, [list(item) for item in best],
                              task.times[best], default_s, task.measured))
    result.kernels.append({"name": task.name, "calls": task.calls, "candidates": task.measured,
                           "schedule": schedule_text(best), "seconds": task.times[best],
                           "speedup": default_s / task.times[best]})


__all__ = ["KernelTask", "TuneResult", "compare", "fused_module", "kernel_tasks", "measure", "scheduled",
           "tune"]
