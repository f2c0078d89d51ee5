"""CPU code generation: loop-level IR, lowering, loop passes, C rendering and compiling.

Importing the package registers its passes (LowerToPrimFunc, the loop passes, CodegenC,
CompileC, PlanMemory, HostCodegen, LinkLibrary) and its config keys (codegen.*, tir.*).
"""

from passinfra.codegen import compiler  # noqa: F401  (registers the codegen.* config keys)
from passinfra.codegen.codegen_c import CodegenC
from passinfra.codegen.compile_c import CompileC
from passinfra.codegen.host import HostCodegen, PlanMemory
from passinfra.codegen.link import LinkLibrary
from passinfra.codegen.lower import LowerToPrimFunc
from passinfra.codegen.prim_func_pass import create_prim_func_pass, prim_func_pass
from passinfra.codegen.transform import RemoveNoOp, Simplify, StorageFlatten, UnrollLoop, VectorizeLoop

__all__ = [
    "CodegenC", "CompileC", "HostCodegen", "PlanMemory", "LinkLibrary", "LowerToPrimFunc",
    "create_prim_func_pass", "prim_func_pass", "RemoveNoOp", "Simplify", "StorageFlatten",
    "UnrollLoop", "VectorizeLoop",
]
