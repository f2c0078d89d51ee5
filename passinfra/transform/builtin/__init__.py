"""The pass library: the built-in passes, one per module, and the analyses and helpers
only they use (``purity``, ``function_types``, ``weight_parameters``).

Everything here is written against the pass infrastructure one level up (PassInfo,
PassContext, the pass classes, the decorators, the registry) and nothing up there
imports it, except ``passinfra.transform``'s ``__init__``, which re-exports the passes so
``from passinfra.transform import FoldConstant`` keeps working. Importing this package
registers every built-in pass.
"""

from passinfra.transform.builtin.alter_op_layout import AlterOpLayout
from passinfra.transform.builtin.backward_fold_scale_axis import BackwardFoldScaleAxis
from passinfra.transform.builtin.dead_code_elimination import DeadCodeElimination
from passinfra.transform.builtin.deduplicate_filters import DeduplicateFilters
from passinfra.transform.builtin.eliminate_common_subexpr import EliminateCommonSubexpr
from passinfra.transform.builtin.fold_constant import FoldConstant
from passinfra.transform.builtin.fold_scale_axis import FoldScaleAxis
from passinfra.transform.builtin.forward_fold_scale_axis import ForwardFoldScaleAxis
from passinfra.transform.builtin.fuse_ops import FuseOps
from passinfra.transform.builtin.fuse_qdq import FuseQDQ
from passinfra.transform.builtin.infer_type import InferType
from passinfra.transform.builtin.inline import Inline
from passinfra.transform.builtin.lambda_lift import LambdaLift
from passinfra.transform.builtin.quantized_lookup_tables import QuantizedLookupTables
from passinfra.transform.builtin.remove_unused_functions import RemoveUnusedFunctions
from passinfra.transform.builtin.simplify_inference import SimplifyInference
from passinfra.transform.builtin.to_a_normal_form import ToANormalForm
from passinfra.transform.builtin.to_graph_normal_form import ToGraphNormalForm
from passinfra.transform.builtin.to_mixed_precision import ToMixedPrecision

# in the order DESIGN.md lists them, then the later ones (passinfra.transform.BUILTIN_PASSES)
__all__ = [
    "InferType", "FoldConstant", "DeadCodeElimination", "EliminateCommonSubexpr",
    "SimplifyInference", "FoldScaleAxis", "BackwardFoldScaleAxis", "ForwardFoldScaleAxis",
    "ToANormalForm", "ToGraphNormalForm", "LambdaLift", "FuseOps", "AlterOpLayout",
    "RemoveUnusedFunctions", "Inline", "DeduplicateFilters", "ToMixedPrecision", "FuseQDQ",
    "QuantizedLookupTables",
]
