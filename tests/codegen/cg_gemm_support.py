"""Helpers shared by the BLAS contraction tests: random inputs, functions over
parameters of given shapes, and a flat walk over a loop-level statement tree."""

from __future__ import annotations

import numpy as np

from passinfra import tir
from passinfra.ir.expr import Function, var


def random_arrays(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype("float32") for s in shapes]


def function_of(shapes, make):
    """``Function(params, make(*params))`` with float32 parameters of ``shapes``."""
    params = [var(f"p{i}", s) for i, s in enumerate(shapes)]
    return Function(params, make(*params))


def statements(stmt):
    """Every statement of a statement tree (explicit stack)."""
    out, stack = [], [stmt]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, tir.SeqStmt):
            stack.extend(node.stmts)
        elif isinstance(node, (tir.For, tir.Allocate, tir.LetStmt)):
            stack.append(node.body)
        elif isinstance(node, tir.IfThenElse):
            stack.extend(s for s in (node.then_case, node.else_case) if s is not None)
    return out
