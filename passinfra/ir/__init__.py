"""The graph-level IR: types, expressions, ops, modules, functors, text, structure."""

from passinfra.ir import op
from passinfra.ir.analysis import all_vars, bound_vars, free_vars
from passinfra.ir.attrs import Attrs
from passinfra.ir.dims import DimExpr, DimVar
from passinfra.ir.expr import (
    BaseFunc,
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    const,
    var,
)
from passinfra.ir.functor import (
    ExprFunctor,
    ExprMutator,
    ExprVisitor,
    expr_children,
    iter_post_order,
    post_order_visit,
)
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op, OpPattern, list_ops, register_op
from passinfra.ir.parser import parse, parse_expr, parse_type
from passinfra.ir.printer import astext
from passinfra.ir.structural import assert_structural_equal, structural_equal, structural_hash
from passinfra.ir.type_infer import infer_module, infer_type
from passinfra.ir.types import DTYPES, FuncType, TensorType, TupleType, Type
from passinfra.ir.well_formed import verify_well_formed, well_formed

__all__ = [
    "op", "Attrs", "BaseFunc", "Call", "Constant", "Expr", "Function", "GlobalVar", "If", "Let",
    "Tuple", "TupleGetItem", "Var", "const", "var", "ExprFunctor", "ExprMutator", "ExprVisitor",
    "expr_children", "iter_post_order", "post_order_visit", "IRModule", "Op", "OpPattern",
    "list_ops", "register_op", "parse", "parse_expr", "parse_type", "astext",
    "assert_structural_equal", "structural_equal",
    "structural_hash", "infer_type", "DTYPES", "FuncType", "TensorType", "TupleType", "Type",
    "verify_well_formed", "well_formed", "infer_module", "all_vars", "bound_vars", "free_vars",
    "DimVar", "DimExpr",
]
