"""``build(mod)``: the whole pipeline, from a graph-level module to a runtime.Module.

Two phases. The function-pass-heavy part (graph optimizations, FuseOps, lowering, loop
passes, C rendering and compilation) is one Sequential, run by the ``scheduler`` when
one is given (``scheduler.run(pipeline, mod)``, which may fan it out to workers) or
in-process. The module passes that need the whole program (memory planning, host code,
linking) then run in the driver, as one link step (:func:`run_link`) whose typed products
(:class:`~passinfra.codegen.artifacts.LinkProducts`) give the
:class:`~passinfra.codegen.artifacts.BuildArtifact` that ``runtime.Module`` is made of;
none of them is stored in the IR.

Passes are looked up in the registry by name, so a user can replace one by registering
another factory under the same name (``register_pass(name, override=True)``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

# importing the packages registers the graph passes and the codegen passes
import passinfra.codegen  # noqa: F401
import passinfra.transform  # noqa: F401
from passinfra.codegen.artifacts import BuildArtifact, LinkProducts, collect_link_products
from passinfra.codegen.build_cache import build_key, lookup_build, store_build
from passinfra.codegen.compute.conv_plan import TARGET_ISA_CONFIG, target_isa
from passinfra.codegen.host import shared_host_analysis
from passinfra.codegen.passes.apply_tuning_records import TUNING_DB_CONFIG
from passinfra.codegen.passes.saturate_pairs import ENABLED_CONFIG as SATURATE_PAIRS_CONFIG
from passinfra.codegen.passes.specialize_kernels import SPECIALIZE_CONFIG, main_dim_vars, specializations
from passinfra.codegen.weights_stream import streaming_weights
from passinfra.errors import RaypassError
from passinfra.interrupts import ThreadPool, outcome_of
from passinfra.ir.module import IRModule
from passinfra.ir.type_infer import infer_type
from passinfra.ir.types import Type
from passinfra.runtime.module import Module
from passinfra.transform.context import PassContext
from passinfra.transform.passes import Pass
from passinfra.transform.registry import get_pass
from passinfra.transform.sequential import Sequential

SUPPORTED_TARGETS = ("c",)

# the graph-level pipeline (each pass gated by the build's opt_level as in a Sequential),
# then lowering, the loop passes and C; then the module passes that link the library
COMPILE_PIPELINE: tuple[str, ...] = (
    "InferType",
    "FuseQDQ",
    "SimplifyInference",
    "FoldConstant",
    "FoldScaleAxis",
    "EliminateCommonSubexpr",
    "DeadCodeElimination",
    "ConvTransposeAsConv",
    "ExactFloatConvolutions",
    "QuantizedLookupTables",
    "AlterOpLayout",
    "FoldConstant",
    "DeduplicateFilters",
    "DenseAsMatmul",
    "RequantizeInKernels",
    "FuseOps",
    "ToMixedPrecision",
    "PanelWeights",
    "IntegerWeights",
    "StreamWeights",
    "LowerToPrimFunc",
    "Simplify",
    "StorageFlatten",
    "VectorizeLoop",
    "UnrollLoop",
    "LoopPartition",
    "RemoveNoOp",
    "Parallelize",
    "WidenGemmOperands",
    "CodegenC",
    "GroupKernels",
    "CompileC",
)
LINK_PIPELINE: tuple[str, ...] = ("PlanMemory", "HostCodegen", "LinkLibrary")


class BuildError(RaypassError):
    """The build cannot run (unknown target, a pass it needs is not available)."""


def _passes(names: tuple[str, ...]) -> list[Pass]:
    return [get_pass(name) for name in names]


def compile_pass_names(ctx: PassContext | None = None) -> tuple[str, ...]:
    """:data:`COMPILE_PIPELINE`, with ApplyTuningRecords after FuseOps when the context's
    config ``codegen.tuning_db`` names a tuning database, SpecializeKernels after
    StreamWeights when its config ``codegen.specialize`` chooses sizes to specialize for,
    and SaturatePairs after FuseQDQ when ``relay.SaturatePairs.enabled`` is set."""
    ctx = ctx or PassContext.current()
    names = list(COMPILE_PIPELINE)
    if ctx.get_config(SATURATE_PAIRS_CONFIG, False):
        names.insert(names.index("FuseQDQ") + 1, "SaturatePairs")
    if ctx.get_config(TUNING_DB_CONFIG, ""):
        names.insert(names.index("FuseOps") + 1, "ApplyTuningRecords")
    if ctx.get_config(SPECIALIZE_CONFIG, ()):
        names.insert(names.index("StreamWeights") + 1, "SpecializeKernels")
    return tuple(names)


def compile_pipeline() -> Sequential:
    """The function-pass-heavy part of the build, as a Sequential (under the current
    PassContext: see :func:`compile_pass_names`)."""
    return Sequential(_passes(compile_pass_names()), opt_level=0, name="build_compile")


def link_pipeline() -> Sequential:
    """Memory planning, host code and linking (module passes, run in the driver)."""
    return Sequential(_passes(LINK_PIPELINE), opt_level=0, name="build_link")


def run_link(compiled: IRModule, ret_type: Type | None = None) -> LinkProducts:
    """The link step: :func:`link_pipeline` on ``compiled`` (the compile pipeline's result),
    in this thread under the current PassContext; returns what its passes made.
    ``ret_type``: main's graph-level return type from before lowering, so the runtime
    metadata gives the outputs main's own shapes. Its passes share one analysis of main
    (:func:`~passinfra.codegen.host.shared_host_analysis`)."""
    with collect_link_products(ret_type) as products, shared_host_analysis():
        link_pipeline()(compiled)
    return products


@contextlib.contextmanager
def _build_context(opt_level: int) -> Iterator[PassContext]:
    """The current context with ``opt_level`` replaced and the kernels' target
    instruction set fixed (config ``codegen.target_isa``: unless the caller set it, this
    machine's, so that workers on other machines compile for the same target). Its
    instruments are shared, not re-entered: the outer ``with`` already entered them and
    will exit them."""
    outer = PassContext.current()
    config = dict(outer.config)
    config.setdefault(TARGET_ISA_CONFIG, target_isa(outer))  # checks a value the caller set
    ctx = PassContext(
        opt_level=opt_level,
        required_pass=outer.required_pass,
        disabled_pass=outer.disabled_pass,
        config=config,
    )
    with ctx:
        ctx.instruments = outer.instruments
        try:
            yield ctx
        finally:
            ctx.instruments = ()


def build(mod: IRModule, opt_level: int = 3, target: str = "c", scheduler: Any = None) -> Module:
    """Compile ``mod`` (its ``main``) into a loaded runtime.Module.

    ``scheduler``: None runs every pass in-process; otherwise the compile pipeline runs as
    ``scheduler.run(pipeline, mod)``. The current PassContext's config (``codegen.*``),
    required/disabled passes and instruments apply; ``opt_level`` replaces its level.
    A build of an unchanged module under unchanged settings is served from the
    whole-build cache without running the passes (see
    :mod:`passinfra.codegen.build_cache`; config ``codegen.build_cache=False`` turns it off);
    a build that ran is stored there while its library loads.
    """
    if target not in SUPPORTED_TARGETS:
        raise BuildError(f"unsupported target {target!r}; supported targets: {', '.join(SUPPORTED_TARGETS)}")
    if not isinstance(mod, IRModule):
        raise BuildError(f"build expects an IRModule, got {type(mod).__name__}")
    main_type = infer_type(mod["main"], mod)
    store: Callable[[], None] | None = None
    # the weights file is written while the kernels compile (StreamWeights); the module
    # adopts it before the block ends, which removes it otherwise
    with streaming_weights():
        with _build_context(opt_level) as ctx:
            # a wrong specialization or an unreadable tuning database is the caller's
            # mistake: say so before any work
            specializations(ctx, main_dim_vars(mod))
            if ctx.get_config(TUNING_DB_CONFIG, ""):
                from passinfra.tuning.database import TuningDatabase

                TuningDatabase.load(ctx.get_config(TUNING_DB_CONFIG))
            key = build_key(mod, ctx, target, compile_pass_names(ctx) + LINK_PIPELINE)
            artifact = lookup_build(key, ctx) if key is not None else None
            if artifact is None:
                artifact = _run_pipelines(mod, scheduler, main_type.ret_type)  # type: ignore[union-attr]
                if key is not None:
                    store = functools.partial(store_build, key, artifact, ctx)
        if store is None:
            return Module(artifact.library, artifact.metadata, artifact.weights)
        return _load_while_storing(artifact, store)


def _load_while_storing(artifact: BuildArtifact, store: Callable[[], None]) -> Module:
    """Load ``artifact`` while ``store`` writes it to the whole-build cache: the two only
    read it, and for a deep model both move every weight (hashing and writing the entry,
    copying the blob into the module). Both finish before this returns, and errors come
    out as if the store had run first: its error, else the load's."""
    with ThreadPool(max_workers=1, thread_name_prefix="raypass-build-store") as pool:
        stored = pool.submit(store)
        module: Module | None = None
        load_error: BaseException | None = None
        try:
            module = Module(artifact.library, artifact.metadata, artifact.weights)
        except BaseException as error:  # noqa: BLE001  (re-raised below, after the store's)
            load_error = error
        store_error = outcome_of(stored)
    if store_error is not None:
        raise store_error
    if load_error is not None:
        raise load_error
    assert module is not None
    return module


def _run_pipelines(mod: IRModule, scheduler: Any, ret_type: Type) -> BuildArtifact:
    pipeline = compile_pipeline()
    compiled = pipeline(mod) if scheduler is None else scheduler.run(pipeline, mod)
    return run_link(compiled, ret_type).build_artifact()


__all__ = [
    "build",
    "BuildError",
    "compile_pipeline",
    "compile_pass_names",
    "link_pipeline",
    "run_link",
    "COMPILE_PIPELINE",
    "LINK_PIPELINE",
]
