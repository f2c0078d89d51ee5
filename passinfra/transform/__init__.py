"""The pass infrastructure: PassInfo, PassContext, passes, Sequential, registry, config.

TVM's semantics unless DESIGN.md says otherwise. Built-in passes (InferType,
FoldConstant, ...) are registered factories exported from here as they land.
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

# The built-in passes: importing them registers them (one pass per module).
from passinfra.transform.alter_op_layout import AlterOpLayout  # noqa: E402
from passinfra.transform.backward_fold_scale_axis import BackwardFoldScaleAxis  # noqa: E402
from passinfra.transform.dead_code_elimination import DeadCodeElimination  # noqa: E402
from passinfra.transform.deduplicate_filters import DeduplicateFilters  # noqa: E402
from passinfra.transform.eliminate_common_subexpr import EliminateCommonSubexpr  # noqa: E402
from passinfra.transform.fold_constant import FoldConstant  # noqa: E402
from passinfra.transform.fold_scale_axis import FoldScaleAxis  # noqa: E402
from passinfra.transform.forward_fold_scale_axis import ForwardFoldScaleAxis  # noqa: E402
from passinfra.transform.fuse_ops import FuseOps  # noqa: E402
from passinfra.transform.infer_type import InferType  # noqa: E402
from passinfra.transform.inline import Inline  # noqa: E402
from passinfra.transform.lambda_lift import LambdaLift  # noqa: E402
from passinfra.transform.remove_unused_functions import RemoveUnusedFunctions  # noqa: E402
from passinfra.transform.simplify_inference import SimplifyInference  # noqa: E402
from passinfra.transform.to_a_normal_form import ToANormalForm  # noqa: E402
from passinfra.transform.to_graph_normal_form import ToGraphNormalForm  # noqa: E402
from passinfra.transform.to_mixed_precision import ToMixedPrecision  # noqa: E402

__all__ += [
    "BUILTIN_PASSES", "InferType", "FoldConstant", "DeadCodeElimination", "EliminateCommonSubexpr",
    "SimplifyInference", "FoldScaleAxis", "BackwardFoldScaleAxis", "ForwardFoldScaleAxis",
    "ToANormalForm", "ToGraphNormalForm", "LambdaLift", "FuseOps", "AlterOpLayout",
    "RemoveUnusedFunctions", "Inline", "DeduplicateFilters", "ToMixedPrecision",
]
BUILTIN_PASSES = __all__[__all__.index("BUILTIN_PASSES") + 1 :]
