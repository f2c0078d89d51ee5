"""CPU code generation: lowering to the loop IR, loop passes, C rendering, compiling, linking.

The loop IR itself is :mod:`passinfra.tir`. This package, by stage:

- lowering (graph function -> PrimFunc): ``lower.py`` (the LowerToPrimFunc pass),
  ``compute/`` (per-op compute rules), ``gemm.py`` (contractions as BLAS calls),
  ``loop_tiling.py`` (loop nests of element-wise stores);
- loop passes (PrimFunc -> PrimFunc), one per file in ``transform/``, built on
  ``prim_func_pass.py``;
- C: ``c_renderer.py`` (PrimFunc -> C text; ``block_copy.py`` spots memcpy/memset loops,
  ``vector_math.py`` probes libmvec), ``codegen_c_pass.py`` (the CodegenC pass);
- compiling: ``cc_driver.py`` (runs the system C compiler and linker),
  ``object_cache.py`` (compiled objects by content), ``compile_c_pass.py`` (the CompileC
  pass), ``build_cache.py`` (whole builds, consulted by ``passinfra.build``);
- the host side: ``host.py`` (PlanMemory, HostCodegen), ``link.py`` (LinkLibrary),
  ``panel_weights_pass.py`` (PanelWeights: the weights the microkernels read, stored in
  panels of output channels), ``stream_weights_pass.py`` + ``weights_stream.py`` (the
  weights file, written while the kernels compile), and
  ``artifacts.py``: what a build produces, typed (a kernel's C and object code through
  accessors; the link step's memory plan, host object, weights, metadata and library in
  ``LinkProducts``, then a ``BuildArtifact``), never IR attrs of the module.

Importing the package registers its passes (PanelWeights, StreamWeights, LowerToPrimFunc, the loop
passes, CodegenC, CompileC, PlanMemory, HostCodegen, LinkLibrary) and its config keys (codegen.*, tir.*).
"""

from passinfra.codegen import cc_driver  # noqa: F401  (registers the codegen.* config keys)
from passinfra.codegen.codegen_c_pass import CodegenC
from passinfra.codegen.compile_c_pass import CompileC
from passinfra.codegen.host import HostCodegen, PlanMemory
from passinfra.codegen.link import LinkLibrary
from passinfra.codegen.lower import LowerToPrimFunc
from passinfra.codegen.panel_weights_pass import PanelWeights
from passinfra.codegen.prim_func_pass import create_prim_func_pass, prim_func_pass
from passinfra.codegen.stream_weights_pass import StreamWeights
from passinfra.codegen.transform import RemoveNoOp, Simplify, StorageFlatten, UnrollLoop, VectorizeLoop

__all__ = [
    "CodegenC", "CompileC", "HostCodegen", "PlanMemory", "LinkLibrary", "LowerToPrimFunc",
    "create_prim_func_pass", "prim_func_pass", "RemoveNoOp", "Simplify", "StorageFlatten",
    "UnrollLoop", "VectorizeLoop", "StreamWeights", "PanelWeights",
]
