"""CompileC: a function pass compiling each PrimFunc's C source to its object code (the
kernel products of :mod:`passinfra.codegen.artifacts`).

This is the expensive step of a build and the one the scheduler fans out to workers:
each call runs the system C compiler (or hits the content-addressed cache) for one
kernel, reading only the function and the ``codegen.*`` config.

Where a kernel was compiled and whether the object came from the cache are facts about
the run, not about the program: the IR carries only the object code (identical wherever
it was made), and the facts go to the run statistics (:mod:`passinfra.transform.run_facts`;
:func:`compile_records` reads them back).

Its unit of work is a compile unit (GroupKernels, :mod:`passinfra.codegen.compile_units`):
a kernel alone, or the first kernel of a unit, whose object then holds every kernel of the
unit (the others are not the pass's work: ``accepts``). Each kernel's fact is reported,
those of a unit by the run that compiled it.

Run in-process over a whole module (the local backend, ``passinfra.build`` without a
scheduler), the pass compiles ahead: every kernel's compile starts at once on
``codegen.compile_jobs`` threads (default: the CPUs this process may use), each running
its own compiler process, and the pass then takes the kernels one by one, in module
order, as a sequential run would: the same objects, facts, counters and first error. A
compiler process is most of a kernel's cost and runs without the GIL, so a local build
uses every core for its kernels (DenseNet-121 on 2 cores: bench/local_compile.py). Where
the stage's passes run one function at a time (a Ray worker's shard: its passes for one
kernel, then the next), nothing is ahead to start; where the scheduler's driver runs
the stage itself (too small to ship, the workers still starting or gone), it wraps its
run in the pass's ``ahead`` and gets the same.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from types import TracebackType

from passinfra.codegen.artifacts import (
    kernel_c_source,
    kernel_compiled_in,
    kernel_unit,
    with_kernel_object_code,
)
from passinfra.codegen.c_intrinsics import uses_library
from passinfra.codegen.c_renderer import sanitize_identifier
from passinfra.codegen.cc_driver import (
    CompileError,
    CompileInterrupted,
    CompileResult,
    CompilerSettings,
    compile_c_result,
)
from passinfra.codegen.conv_runtime import RUNTIME_LIBRARIES, prefetch_runtime_compile
from passinfra.codegen.prim_func_pass import PrimFuncPass
from passinfra.errors import IRError
from passinfra.interrupts import ThreadPool, interrupts_deferred, outcome_of, wait_for
from passinfra.ir.expr import BaseFunc, GlobalVar
from passinfra.ir.module import IRModule
from passinfra.runtime.cpus import available_cpus
from passinfra.tir import PrimFunc
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.registry import register_pass
from passinfra.transform.run_facts import RunFact, report_fact
from passinfra.transform.schedule import function_context

PASS_NAME = "CompileC"
CACHE_HIT_FACT = "cache_hit"  # the fact CompileC reports per kernel: the object came from the cache
UNIT_FACT = "unit_kernels"  # ... and per compile unit (GroupKernels): the kernels it compiled at once
COMPILE_JOBS_CONFIG = "codegen.compile_jobs"  # compiler processes at once in-process (1: one at a time)
register_config(COMPILE_JOBS_CONFIG, int)


def compile_jobs(ctx: PassContext) -> int:
    """How many kernels an in-process CompileC compiles at once (module docstring)."""
    jobs = ctx.get_config(COMPILE_JOBS_CONFIG, None)
    return max(1, int(jobs)) if jobs is not None else available_cpus()


class _AheadCompiles:
    """The compiles of a CompileC pass started ahead on threads, taken in order by the
    pass. One future per (source, settings) and kernel, so two kernels of one source are
    two compiles, as they are one at a time."""

    def __init__(self, jobs: int) -> None:
        self._pool = ThreadPool(jobs, thread_name_prefix="raypass-cc")
        self._futures: dict[tuple[str, CompilerSettings], deque[Future[CompileResult]]] = {}
        self._by_function: dict[str, Future[CompileResult]] = {}

    def start(self, source: str, settings: CompilerSettings, name: str, function: str = "") -> None:
        future = self._pool.submit(compile_c_result, source, settings, name)
        self._futures.setdefault((source, settings), deque()).append(future)
        if function:
            self._by_function[function] = future

    def started(self, function: str) -> bool:
        """Whether the compile of ``function`` has begun (running or finished): a run
        that hands the rest of a stage to others keeps these (not compiled twice)."""
        future = self._by_function.get(function)
        if future is None:
            return False
        with interrupts_deferred():  # the future's lock: module docstring of passinfra.interrupts
            return future.running() or future.done()

    def take(self, source: str, settings: CompilerSettings) -> CompileResult | None:
        """The compile started for this kernel (waiting for it; its error raised here),
        or None when none was (the pass compiles it itself)."""
        waiting = self._futures.get((source, settings))
        return wait_for(waiting.popleft()) if waiting else None

    def __enter__(self) -> _AheadCompiles:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        # after an error or Ctrl-C: compiles not begun are dropped, running ones end (a
        # terminal's Ctrl-C ends them too); a failed compile no kernel asked for keeps no
        # C file (one at a time it would not have run)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for waiting in self._futures.values():
            for future in waiting:
                failure = None if future.cancelled() else outcome_of(future)
                if isinstance(failure, CompileError) and failure.kept is not None:
                    shutil.rmtree(failure.kept, ignore_errors=True)


_ahead = threading.local()  # .compiles: the _AheadCompiles of the pass this thread runs


def _settings_for(func: PrimFunc, ctx: PassContext) -> CompilerSettings:
    """The compiler settings of ``func``'s compile (its own schedule's, if it has one)."""
    with function_context(ctx, func) as scheduled:
        return CompilerSettings.from_context(scheduled)


def compiled_source(func: PrimFunc) -> str | None:
    """The C that CompileC compiles for ``func``: its compile unit's, if it leads one
    (GroupKernels), else its own (None before CodegenC)."""
    unit = kernel_unit(func)
    return unit[0] if unit is not None else kernel_c_source(func)


def _compile_c(func: PrimFunc, mod: IRModule, ctx: PassContext) -> PrimFunc:
    source = compiled_source(func)
    symbol = str(func.attrs.get("global_symbol", "kernel"))
    if source is None:
        raise IRError(f"PrimFunc {symbol!r} has no 'c_source' attr; run CodegenC before CompileC")
    settings = CompilerSettings.from_context(ctx)
    if any(uses_library(func, library.name) for library in RUNTIME_LIBRARIES):
        prefetch_runtime_compile(settings)  # overlaps the kernels' compiles; LinkLibrary waits for it
    ahead: _AheadCompiles | None = getattr(_ahead, "compiles", None)
    unit = kernel_unit(func)
    try:
        result = ahead.take(source, settings) if ahead is not None else None
        if result is None:
            result = compile_c_result(source, settings, name=sanitize_identifier(symbol))
    except CompileInterrupted:
        raise
    except CompileError as error:
        if unit is None:
            raise
        # the C file is the unit's: say which kernels it holds (each under a "/* kernel NAME */" line)
        failure = CompileError(f"{error}\n  the C file is the compile unit of kernels {', '.join(unit[1])}")
        failure.kept = error.kept
        raise failure from error
    # the process that ran this is recorded with the fact; neither goes into the IR
    report_fact(CACHE_HIT_FACT, result.cache_hit)
    if unit is not None:  # the unit's other kernels were compiled here too
        report_fact(UNIT_FACT, unit[1])
        for kernel in unit[1][1:]:
            report_fact(CACHE_HIT_FACT, result.cache_hit, function=kernel)
    return with_kernel_object_code(func, result.object_code)


class CompileCPass(PrimFuncPass):
    """CompileC: in-process over a module, its compiles start ahead (module docstring).
    A kernel whose code is in another's compile unit (GroupKernels) is not its work."""

    reads_module = False

    def accepts(self, func: BaseFunc) -> bool:
        return super().accepts(func) and kernel_compiled_in(func) is None  # type: ignore[arg-type]

    def __init__(self) -> None:
        super().__init__(_compile_c, PassInfo(0, PASS_NAME))

    def transform_module_functions(self, mod: IRModule, ctx: PassContext) -> IRModule:
        with self.ahead(list(mod.items()), ctx):
            return super().transform_module_functions(mod, ctx)

    @contextlib.contextmanager
    def ahead(self, functions: Sequence[tuple[GlobalVar | str, BaseFunc]], ctx: PassContext
              ) -> Iterator[_AheadCompiles | None]:
        """While the block runs, this pass run in this thread takes its kernels' objects
        from compiles started now, in the order given, ``codegen.compile_jobs`` at a time
        (yields them: ``started(name)`` says which have begun; None when fewer than two
        would run at once, or an outer block already started them). What an executor
        running this pass in one process wraps its run in (module docstring)."""
        kernels = [(str(getattr(name, "name_hint", name)), func) for name, func in functions
                   if self.accepts(func) and compiled_source(func) is not None]  # type: ignore[arg-type]
        jobs = min(compile_jobs(ctx), len(kernels))
        if jobs < 2 or getattr(_ahead, "compiles", None) is not None:
            yield None
            return
        with _AheadCompiles(jobs) as compiles:
            for name, func in kernels:
                symbol = str(func.attrs.get("global_symbol", name))
                compiles.start(compiled_source(func), _settings_for(func, ctx),  # type: ignore[arg-type]
                               sanitize_identifier(symbol), name)
            _ahead.compiles = compiles
            try:
                yield compiles
            finally:
                _ahead.compiles = None


def compile_records(facts: Iterable[RunFact]) -> dict[str, tuple[int, bool]]:
    """``{kernel name: (pid of the process that ran CompileC on it, whether the object
    was a cache hit)}`` from the facts of a run (``Scheduler.last_run.facts``, or a
    :func:`~passinfra.transform.run_facts.collect_facts` list); the last run of a kernel wins."""
    return {
        fact.function: (fact.pid, bool(fact.value))
        for fact in facts
        if fact.pass_name == PASS_NAME and fact.name == CACHE_HIT_FACT
    }


def compile_counts(facts: Iterable[RunFact]) -> dict[int, tuple[int, int]]:
    """``{pid: (kernels CompileC ran on in that process, how many were cache hits)}``."""
    counts: dict[int, tuple[int, int]] = {}
    for pid, hit in compile_records(facts).values():
        kernels, hits = counts.get(pid, (0, 0))
        counts[pid] = (kernels + 1, hits + int(hit))
    return counts


@register_pass(PASS_NAME)
def CompileC() -> PrimFuncPass:  # noqa: N802 - pass factories are named like classes
    """Compile every PrimFunc's C source into its ``object_code`` attr; each compile
    reports whether the object came from the cache (see :func:`compile_records`)."""
    return CompileCPass()


__all__ = ["CACHE_HIT_FACT", "COMPILE_JOBS_CONFIG", "UNIT_FACT", "CompileC", "compile_counts", "compile_jobs",
           "compile_records"]
