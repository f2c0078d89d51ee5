"""The pass infrastructure: PassInfo, PassContext, passes, Sequential, registry, config.

TVM's semantics unless DESIGN.md says otherwise. The modules here are the machinery; the
built-in passes (InferType, FoldConstant, ...) live in the pass library,
``passinfra.transform.builtin``, and are registered factories exported from here too.
"""

from passinfra.transform.config import list_configs, register_config
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import function_pass, module_pass
from passinfra.transform.dependencies import required_graph, resolve_required
from passinfra.transform.errors import (
    FunctionSetChangedError,
    PassArgumentError,
    PassConfigError,
    PassConfigTypeError,
    PassContextError,
    PassCycleError,
    PassDependencyError,
    PassError,
    PassNotFoundError,
    PassRegistrationError,
    PassReturnTypeError,
)
from passinfra.transform.instrumented import run_instrumented
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import FunctionPass, ModulePass, Pass
from passinfra.transform.print_ir import PrintIR
from passinfra.transform.registry import get_pass, list_passes, register_pass, unregister_pass
from passinfra.transform.sequential import Sequential

__all__ = [
    "PassInfo", "PassContext", "Pass", "ModulePass", "FunctionPass", "Sequential",
    "module_pass", "function_pass", "register_pass", "unregister_pass", "get_pass", "list_passes",
    "register_config", "list_configs", "required_graph", "resolve_required", "run_instrumented",
    "PrintIR", "PassError", "PassArgumentError", "PassConfigError", "PassConfigTypeError",
    "PassContextError", "PassCycleError", "PassDependencyError", "PassNotFoundError",
    "PassRegistrationError", "PassReturnTypeError", "FunctionSetChangedError",
]

# The pass library (passinfra/transform/builtin), re-exported: importing it registers the
# built-in passes. The one place the infrastructure names the library; no other module
# up here imports it (tests/transform/test_layering.py).
from passinfra.transform.builtin import (  # noqa: E402
    AlterOpLayout,
    BackwardFoldScaleAxis,
    DeadCodeElimination,
    DeduplicateFilters,
    EliminateCommonSubexpr,
    FoldConstant,
    FoldScaleAxis,
    ForwardFoldScaleAxis,
    FuseOps,
    FuseQDQ,
    InferType,
    Inline,
    LambdaLift,
    QuantizedLookupTables,
    RemoveUnusedFunctions,
    SimplifyInference,
    ToANormalForm,
    ToGraphNormalForm,
    ToMixedPrecision,
)

__all__ += [
    "BUILTIN_PASSES", "InferType", "FoldConstant", "DeadCodeElimination", "EliminateCommonSubexpr",
    "SimplifyInference", "FoldScaleAxis", "BackwardFoldScaleAxis", "ForwardFoldScaleAxis",
    "ToANormalForm", "ToGraphNormalForm", "LambdaLift", "FuseOps", "AlterOpLayout",
    "RemoveUnusedFunctions", "Inline", "DeduplicateFilters", "ToMixedPrecision", "FuseQDQ",
    "QuantizedLookupTables",
]
BUILTIN_PASSES = __all__[__all__.index("BUILTIN_PASSES") + 1 :]
