"""The build-step passes of the code generator, one per module, each module named after
the pass it registers (the snake_case of the registered name: ``CodegenC`` in
``codegen_c.py``), as the loop passes are in :mod:`passinfra.codegen.transform`.

A module here holds the pass factory, its pass function and what only that pass uses
(its config keys, the run facts it reports); the machinery other code shares stays in
the package above (:mod:`~passinfra.codegen.lower`, :mod:`~passinfra.codegen.host`,
:mod:`~passinfra.codegen.weights_stream`, ...). Importing this package registers them.
"""

# isort: off
# The order the passes are registered in, kept as it was before they moved here: the
# registry is a dict, so this order is what iterating it yields (and it loads each
# module's dependencies, which register config keys, in the order they always loaded).
from passinfra.codegen.passes.codegen_c import CodegenC
from passinfra.codegen.passes.compile_c import CompileC
from passinfra.codegen.passes.lower_to_prim_func import LowerToPrimFunc
from passinfra.codegen.passes.plan_memory import PlanMemory
from passinfra.codegen.passes.host_codegen import HostCodegen
from passinfra.codegen.passes.link_library import LinkLibrary
from passinfra.codegen.passes.panel_weights import PanelWeights
from passinfra.codegen.passes.stream_weights import StreamWeights
from passinfra.codegen.passes.specialize_kernels import SpecializeKernels
from passinfra.codegen.passes.apply_tuning_records import ApplyTuningRecords
from passinfra.codegen.passes.dense_as_matmul import DenseAsMatmul
from passinfra.codegen.passes.conv_transpose_as_conv import ConvTransposeAsConv
from passinfra.codegen.passes.exact_float_convolutions import ExactFloatConvolutions
from passinfra.codegen.passes.requantize_in_kernels import RequantizeInKernels
from passinfra.codegen.passes.integer_weights import IntegerWeights
from passinfra.codegen.passes.group_kernels import GroupKernels
from passinfra.codegen.passes.saturate_pairs import SaturatePairs
# isort: on

__all__ = ["CodegenC", "CompileC", "LowerToPrimFunc", "PlanMemory", "HostCodegen", "LinkLibrary",
           "PanelWeights", "StreamWeights", "SpecializeKernels", "ApplyTuningRecords",
           "DenseAsMatmul", "ConvTransposeAsConv", "ExactFloatConvolutions",
           "RequantizeInKernels", "IntegerWeights", "GroupKernels", "SaturatePairs"]
