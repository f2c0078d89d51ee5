"""Loop-level passes over PrimFuncs, one per module; each factory is registered under
its own name with :func:`passinfra.transform.register_pass`."""

from passinfra.codegen.transform.loop_partition import LoopPartition
from passinfra.codegen.transform.parallelize import Parallelize
from passinfra.codegen.transform.remove_no_op import RemoveNoOp
from passinfra.codegen.transform.simplify import Simplify
from passinfra.codegen.transform.storage_flatten import StorageFlatten
from passinfra.codegen.transform.unroll_loop import UnrollLoop, UnrollLoopConfig
from passinfra.codegen.transform.vectorize_loop import VectorizeLoop
from passinfra.codegen.transform.widen_gemm_operands import WidenGemmOperands

__all__ = ["Simplify", "StorageFlatten", "UnrollLoop", "UnrollLoopConfig", "VectorizeLoop", "RemoveNoOp",
           "LoopPartition", "Parallelize", "WidenGemmOperands"]
