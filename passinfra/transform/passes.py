"""Pass, ModulePass and FunctionPass.

A pass maps an IRModule to a new IRModule and never mutates its input (module pass
functions get a copy; function passes build a new module). ``pass(mod)`` runs under
``PassContext.current()``; ``pass.run(mod, ctx)`` under an explicit context.
"""

from __future__ import annotations

from collections.abc import Callable

from passinfra.ir.expr import BaseFunc, Function, GlobalVar
from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.errors import (
    FunctionSetChangedError,
    PassArgumentError,
    PassReturnTypeError,
    add_note,
)
from passinfra.transform.function_stage import run_stage_over
from passinfra.transform.instrumented import PassBody, run_instrumented
from passinfra.transform.module_view import function_view
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.run_facts import begin_run, end_run

ModulePassFunc = Callable[[IRModule, PassContext], IRModule]
FunctionPassFunc = Callable[[BaseFunc, IRModule, PassContext], BaseFunc]


class Pass:
    """Base class: a named module-to-module transformation described by ``info``."""

    def __init__(self, info: PassInfo) -> None:
        if not isinstance(info, PassInfo):
            raise PassArgumentError(f"a pass needs a PassInfo, got {info!r}")
        self.info = info

    @property
    def name(self) -> str:
        return self.info.name

    def __call__(self, mod: IRModule) -> IRModule:
        return self.run(mod, PassContext.current())

    def run(self, mod: IRModule, ctx: PassContext | None = None) -> IRModule:
        """Run this pass (instrumented) on ``mod`` under ``ctx`` (default: the current one)."""
        if not isinstance(mod, IRModule):
            raise PassArgumentError(f"pass {self.info.name!r} expects an IRModule, got {type(mod).__name__}")
        ctx = PassContext.current() if ctx is None else ctx
        return self._run_instrumented(mod, ctx, lambda m: self.transform(m, ctx))

    def _run_instrumented(self, mod: IRModule, ctx: PassContext, body: PassBody) -> IRModule:
        """The hook sequence around ``body`` (see :func:`instrumented.run_instrumented`);
        the scheduler substitutes a body that runs the work on workers."""
        return run_instrumented(self.info, mod, ctx, body)

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        """The pass body, uninstrumented. Subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement transform")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.info!r})"


class ModulePass(Pass):
    """A pass over the whole module: ``pass_func(mod, ctx) -> IRModule``.

    ``pass_func`` receives a copy of the input module, so it may update it in place and
    return it without touching the caller's module.
    """

    def __init__(self, pass_func: ModulePassFunc, info: PassInfo) -> None:
        super().__init__(info)
        if not callable(pass_func):
            raise PassArgumentError(
                f"module pass {info.name!r} needs a callable pass_func, got {pass_func!r}"
            )
        self.pass_func = pass_func

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        result = self.pass_func(mod.copy(), ctx)
        if not isinstance(result, IRModule):
            raise PassReturnTypeError(
                f"module pass {self.info.name!r} returned {type(result).__name__}, expected an IRModule"
            )
        return result


class FunctionPass(Pass):
    """A pass applied to each function: ``pass_func(func, mod, ctx) -> function``.

    Every function the pass accepts (``accepts``: a Function without a truthy
    ``SkipOptimization`` attr) is transformed against a read-only view of the module as
    it was before the pass; the results are applied afterwards, in module order, to a
    new module. Functions cannot be added or removed.

    Scheduler seams: ``transform_module_functions`` runs the pass through the per-function
    loop every executor shares (``function_stage``: in-process, the scheduler's driver, a
    worker; a parallel scheduler replaces this method), which calls
    ``transform_function_in`` once per (pass, function). ``reads_module``
    says whether the pass function looks at other functions of ``mod``; the default
    (True) is the safe one, and a pass that promises False lets the scheduler batch it
    with its neighbours, and sees only its own function (``module_view``), wherever it runs.
    """

    reads_module: bool = True

    def __init__(self, pass_func: FunctionPassFunc, info: PassInfo, reads_module: bool | None = None) -> None:
        super().__init__(info)
        if reads_module is not None:
            self.reads_module = bool(reads_module)
        if not callable(pass_func):
            raise PassArgumentError(
                f"function pass {info.name!r} needs a callable pass_func, got {pass_func!r}"
            )
        self.pass_func = pass_func

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return self.transform_module_functions(mod, ctx)

    def accepts(self, func: BaseFunc) -> bool:
        """Whether this pass transforms ``func`` (later passes on PrimFuncs override it)."""
        return isinstance(func, Function) and not func.attrs.get("SkipOptimization", False)

    def transform_module_functions(self, mod: IRModule, ctx: PassContext) -> IRModule:
        """Transform every accepted function of ``mod``; return a new module. This is a
        stage of one pass, run by the kernel every executor shares (``function_stage``)."""
        gvs = {gv.name_hint: gv for gv in mod.functions}
        run = run_stage_over(((0, self),), ((gv.name_hint, func) for gv, func in mod.items()), mod, ctx)
        if run.error is not None:
            raise run.error.error
        return self.apply_updates(mod, {gvs[name]: func for name, func in run.changed.items()})

    def transform_function_in(
        self, func: BaseFunc, base: IRModule | None, ctx: PassContext, name: str
    ) -> BaseFunc:
        """Transform ``func``, called ``name`` in ``base`` (the module before this pass; None
        where only the function is at hand, which a pass that promised reads_module=False
        never misses), handing the pass the view of ``base`` it may read."""
        return self.transform_function(func, function_view(self, base, name, func), ctx, name)

    def transform_function(
        self, func: BaseFunc, mod: IRModule, ctx: PassContext, name: str = "<anonymous>"
    ) -> BaseFunc:
        """Apply the pass function to one function; ``name`` is used in error messages
        and names the function in the facts the pass reports (``run_facts``)."""
        previous = begin_run(self.info.name, name)
        try:
            result = self.pass_func(func, mod, ctx)
        except BaseException as error:
            add_note(error, f"raised by function pass {self.info.name!r} on function {name!r}")
            raise
        finally:
            end_run(previous)
        if not isinstance(result, BaseFunc):
            raise PassReturnTypeError(
                f"function pass {self.info.name!r} returned {type(result).__name__} for function "
                f"{name!r}, expected a Function"
            )
        return result

    def apply_updates(self, mod: IRModule, updates: dict[GlobalVar, BaseFunc]) -> IRModule:
        """A new module: ``mod`` with the functions in ``updates`` replaced, order kept."""
        unknown = [gv.name_hint for gv in updates if gv not in mod]
        if unknown:
            raise FunctionSetChangedError(
                f"function pass {self.info.name!r} cannot add functions; it produced {unknown}"
            )
        result = mod.copy()
        for gv, func in updates.items():
            result[gv] = func
        return result
