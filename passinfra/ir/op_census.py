"""Which operators a function calls, and where: one walk of its body, remembered for as
long as the function lives.

Many rewrite passes touch only the calls of a few operators (a transposed convolution, a
requantize, a dense layer) and, where a model has none, walk and return the function as
it was. On DenseNet-121 four such passes of the driver's serial path spent about 60 ms
doing that, every compile, however many workers there are. A pass asks the census first
(:func:`op_calls`, :func:`calls_any`) and returns the function at once when it has
nothing to rewrite; a pass that returns its input unchanged leaves the next pass the
same census, so one walk serves them all.

The census belongs to the function object (IR nodes are immutable, so what it calls
never changes): it is kept in a weak mapping and goes with the function. It holds the
calls themselves, never the function, so it does not keep the function alive.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from passinfra.ir.expr import Call, Function
from passinfra.ir.functor import iter_post_order
from passinfra.ir.op.registry import Op

_CENSUS: weakref.WeakKeyDictionary[Function, Mapping[Op, tuple[Call, ...]]] = weakref.WeakKeyDictionary()


def op_calls(func: Function) -> Mapping[Op, tuple[Call, ...]]:
    """``{operator: its calls in func, children before parents}`` over ``func``'s body
    (nested functions included), read-only."""
    found = _CENSUS.get(func)
    if found is None:
        calls: dict[Op, list[Call]] = {}
        for node in iter_post_order(func.body):
            if isinstance(node, Call) and isinstance(node.op, Op):
                calls.setdefault(node.op, []).append(node)
        found = MappingProxyType({op: tuple(sites) for op, sites in calls.items()})
        _CENSUS[func] = found
    return found


def calls_any(func: Function, ops: Iterable[Op]) -> bool:
    """Whether ``func`` calls any of ``ops``."""
    census = op_calls(func)
    return any(op in census for op in ops)


__all__ = ["calls_any", "op_calls"]
