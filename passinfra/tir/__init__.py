"""The loop-level IR ("TIR"): what a primitive function is lowered to before C.

Modules, each importing only the ones above it in this list (no import circle):

- :mod:`~passinfra.tir.schema`: how a node kind declares its fields, and what is derived
  from the declaration (children, rebuild, structural key, table rows, construction checks);
- :mod:`~passinfra.tir.nodes`: expressions, statements, :class:`PrimFunc`;
- :mod:`~passinfra.tir.functor`: visitors and mutators, the walks (``iter_stmts``,
  ``any_stmt``, ``iter_exprs``, ``any_expr``), ``same_expr``, ``substitute``;
- :mod:`~passinfra.tir.sizes`: graph-level symbolic dimensions as index expressions over a
  kernel's size variables (``size_scope``);
- :mod:`~passinfra.tir.printer`: the text form (``tir_astext``, ``PrimFunc.astext()``);
- :mod:`~passinfra.tir.structural`: alpha-equivalence, the flat table form, the wire
  format;
- :mod:`~passinfra.tir.arith`: integer range analysis and affine decomposition;
- :mod:`~passinfra.tir.intrinsics`: statement intrinsics (the GEMM call) and their meaning;
- :mod:`~passinfra.tir.evaluator`: a reference interpreter (``run_prim_func``);
- :mod:`~passinfra.tir.verify`: the verifier (``verify_prim_func``).

``==`` and ``hash`` are identity on every node, as in the graph IR; structure is
compared through functions (``same_expr``, ``tir_structural_equal``).

The package exports the nodes (``from passinfra import tir``; ``tir.For(...)``), and
importing it registers PrimFunc with the graph IR's module printer, structural
equality/hash and wire format (registries in :mod:`passinfra.ir`, which never imports
this package).
"""

from passinfra.tir import printer as _printer  # noqa: F401  (registers PrimFunc's module text)
from passinfra.tir import structural as _structural  # noqa: F401  (registers equality/hash, wire)
from passinfra.tir.nodes import *  # noqa: F403  (the node classes are the package's namespace)
from passinfra.tir.nodes import __all__ as _node_names

__all__ = list(_node_names)
