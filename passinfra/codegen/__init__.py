"""CPU code generation: lowering to the loop IR, loop passes, C rendering, compiling, linking.

The loop IR itself is :mod:`passinfra.tir`. The passes live in two sub-packages, one
pass per module, each module named after the pass it registers (the snake_case of its
name): ``passes/`` the build steps (LowerToPrimFunc, CodegenC, CompileC, PanelWeights,
StreamWeights, SpecializeKernels, ApplyTuningRecords, DenseAsMatmul, ConvTransposeAsConv,
ExactFloatConvolutions, RequantizeInKernels, IntegerWeights, SaturatePairs, PlanMemory,
HostCodegen, LinkLibrary) and ``transform/`` the loop passes
(PrimFunc -> PrimFunc, built on ``prim_func_pass.py``). The rest of this package is the
machinery they run, by stage:

- lowering (graph function -> PrimFunc): ``lower.py``, ``compute/`` (per-op compute
  rules), ``gemm.py`` (contractions as BLAS calls), ``loop_tiling.py`` (loop nests of
  element-wise stores);
- C: ``c_renderer.py`` (PrimFunc -> C text; ``block_copy.py`` spots memcpy/memset loops,
  ``vector_math.py`` probes libmvec), ``c_intrinsics.py`` (the intrinsic renderers kernel
  modules register, and the libraries a function's kernel calls need);
- compiling: ``cc_driver.py`` (runs the system C compiler and linker),
  ``object_cache.py`` (compiled objects by content), ``build_cache.py`` (whole builds,
  consulted by ``passinfra.build``);
- the host side: ``host.py`` (the analysis of ``main``, the memory planner, the host C),
  ``weights_stream.py`` (the weights file, written while the kernels compile),
  ``thread_pool.py`` and ``conv_runtime.py`` (what the library links besides its
  kernels), and ``artifacts.py``: what a build produces, typed (a kernel's C and object
  code through accessors; the link step's memory plan, host object, weights, metadata
  and library in ``LinkProducts``, then a ``BuildArtifact``), never IR attrs of the
  module.

Importing the package registers its passes (the loop passes, then CodegenC, CompileC,
LowerToPrimFunc, PlanMemory, HostCodegen, LinkLibrary, PanelWeights, StreamWeights,
SpecializeKernels, ApplyTuningRecords, DenseAsMatmul, ConvTransposeAsConv,
ExactFloatConvolutions, RequantizeInKernels, IntegerWeights, GroupKernels, SaturatePairs) and
its config keys (codegen.*, tir.*).
"""

from passinfra.codegen import cc_driver  # noqa: F401  (registers the codegen.* config keys)
from passinfra.codegen.passes import (
    ApplyTuningRecords,
    CodegenC,
    CompileC,
    ConvTransposeAsConv,
    DenseAsMatmul,
    ExactFloatConvolutions,
    GroupKernels,
    HostCodegen,
    IntegerWeights,
    LinkLibrary,
    LowerToPrimFunc,
    PanelWeights,
    PlanMemory,
    RequantizeInKernels,
    SaturatePairs,
    SpecializeKernels,
    StreamWeights,
)
from passinfra.codegen.prim_func_pass import create_prim_func_pass, prim_func_pass
from passinfra.codegen.transform import RemoveNoOp, Simplify, StorageFlatten, UnrollLoop, VectorizeLoop

__all__ = [
    "CodegenC", "CompileC", "HostCodegen", "PlanMemory", "LinkLibrary", "LowerToPrimFunc",
    "create_prim_func_pass", "prim_func_pass", "RemoveNoOp", "Simplify", "StorageFlatten",
    "UnrollLoop", "VectorizeLoop", "StreamWeights", "PanelWeights", "SpecializeKernels", "ApplyTuningRecords",
    "DenseAsMatmul", "ConvTransposeAsConv", "ExactFloatConvolutions",
    "RequantizeInKernels", "IntegerWeights", "GroupKernels", "SaturatePairs",
]
