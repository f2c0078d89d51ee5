"""QuantizedLookupTables: an element-wise function of one 8-bit tensor is a table of 256.

A quantized model computes activations the integer kernels do not have in float32
between a DequantizeLinear and a QuantizeLinear: hard-swish is ``Q(DQ(y) *
DQ(Q(hard_sigmoid(DQ(y)))))``, a dozen float operations and three roundings per element
of ``y``. Whatever the operations, the result is a function of the one 8-bit value ``y``
holds, so it takes one of 256 values: onnxruntime computes QLinearSigmoid and
QLinearLeakyRelu through such tables. This pass finds each maximal such expression (the
result, of any type, of element-wise ops whose operands are one 8-bit tensor of the
result's shape and scalar constants: the hard-swish above, and with it the conversion to
float32 of the next layer when that runs on the float kernels), evaluates it on the 256
values with the ops' own
implementations (the interpreter's arithmetic, which is the compiled code's), and replaces
it by ``take(table, y)``: one load an element.

Only expressions of at least :data:`MIN_OPS` operations are replaced (a lone
QuantizeLinear costs less than its table). Constants must be scalars: a per-channel
parameter would need a table per channel.

Where: after FuseQDQ and FoldConstant (the groups that become integer ops are gone, the
parameters are constants) and ExactFloatConvolutions (whose float32 inputs are then part
of the tables), before AlterOpLayout.
"""

from __future__ import annotations

import numpy as np

from passinfra import ir
from passinfra.ir import op
from passinfra.ir.expr import Call, Constant, Expr, Function, Var
from passinfra.ir.op.registry import Op, OpPattern
from passinfra.ir.types import TensorType
from passinfra.runtime import evaluate
from passinfra.transform.builtin.function_types import ensure_typed
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import function_pass
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

ENABLED_CONFIG = "relay.QuantizedLookupTables.enabled"
register_config(ENABLED_CONFIG, bool)

_EIGHT_BITS = ("uint8", "int8")
# the fewest operations an expression has to be worth a table (hard-swish has 9)
MIN_OPS = 3


def _tensor(expr: Expr) -> TensorType | None:
    ty = expr._checked_type
    return ty if isinstance(ty, TensorType) else None


# the most nodes an expression is searched through (a table replaces a short chain; the
# search stops early in long element-wise chains)
MAX_NODES = 64


class _Expression:
    """The element-wise expression rooted at a call, down to its one 8-bit input: an
    8-bit node is the input where the expression below it has other inputs (a
    requantize of an int32 sum), else part of it."""

    def __init__(self, root: Call) -> None:
        self.shape = _tensor(root).shape
        self._memo: dict[int, tuple[frozenset, int] | None] = {}
        found = self._inputs(root, root)
        self.valid = found is not None and len(found[0]) == 1 and root not in found[0]
        self.inputs, self.ops = (set(found[0]), found[1]) if found is not None else (set(), 0)

    def _inputs(self, node: Expr, root: Call) -> tuple[frozenset, int] | None:
        """(the 8-bit inputs below ``node``, the operations counted) or None (invalid)."""
        if id(node) in self._memo:
            return self._memo[id(node)]
        if len(self._memo) > MAX_NODES:
            return None
        self._memo[id(node)] = None  # (a cycle cannot occur; this bounds re-entry)
        result = self._search(node, root)
        self._memo[id(node)] = result
        return result

    def _search(self, node: Expr, root: Call) -> tuple[frozenset, int] | None:
        if isinstance(node, Constant):
            return (frozenset(), 0) if node.data.size == 1 else None
        ty = _tensor(node)
        if ty is None:
            return None
        as_input = (frozenset({node}), 0) if ty.shape == self.shape and ty.dtype in _EIGHT_BITS else None
        if not self._element_wise(node, ty):
            return as_input
        inputs: frozenset = frozenset()
        ops = 1
        for arg in node.args:
            below = self._inputs(arg, root)
            if below is None:
                return as_input if node is not root else None
            inputs, ops = inputs | below[0], ops + below[1]
        if len(inputs) > 1:
            return as_input if node is not root else None
        return inputs, ops

    def _element_wise(self, node: Expr, ty: TensorType) -> bool:
        return (isinstance(node, Call) and isinstance(node.op, Op) and not node.op.stateful
                and node.op.pattern <= OpPattern.BROADCAST and ty.shape == self.shape)


def _rebuilt(root: Expr, replacements: dict[Expr, Expr]) -> Expr:
    """``root`` with the nodes of ``replacements`` replaced (a copy of the calls above them)."""
    done: dict[int, Expr] = {}

    def build(node: Expr) -> Expr:
        if node in replacements:
            return replacements[node]
        if id(node) in done:
            return done[id(node)]
        if isinstance(node, Call):
            result: Expr = Call(node.op, [build(arg) for arg in node.args], node.attrs)
        else:
            result = node
        done[id(node)] = result
        return result

    return build(root)


def table(root: Call, source: Expr) -> np.ndarray:
    """The values of ``root`` (an element-wise expression of ``source``) at each of the 256
    values of ``source``'s type, in order from the lowest."""
    dtype = _tensor(source).dtype
    info = np.iinfo(dtype)
    values = np.arange(info.min, info.max + 1).astype(dtype)
    var = Var("lookup", TensorType((values.size,), dtype))
    with np.errstate(all="ignore"):
        return np.asarray(evaluate(Function([var], _rebuilt(root, {source: var})), values))


class _LookupTables(ir.ExprMutator):
    def visit_call(self, call: Call) -> Expr:
        ty = _tensor(call)
        if ty is not None and ty.shape:
            expression = _Expression(call)
            if expression.valid and expression.ops >= MIN_OPS:
                (source,) = expression.inputs
                index = self.visit(source)  # uint8 codes index the table as they are
                if _tensor(source).dtype == "int8":
                    index = op.add(op.cast(index, "int32"), Constant.owning(np.array(128, np.int32)))
                return op.take(Constant.owning(table(call, source)), index, axis=0)
        return super().visit_call(call)


def quantized_lookup_tables_function(func: Function, mod: ir.IRModule, ctx: PassContext) -> Function:
    """The per-function body of :func:`QuantizedLookupTables`."""
    if not ctx.get_config(ENABLED_CONFIG, True):
        return func
    ensure_typed(func, mod)
    return _LookupTables().visit(func)


@register_pass("QuantizedLookupTables")
def QuantizedLookupTables() -> FunctionPass:  # noqa: N802 - pass factories are named like classes
    """Element-wise functions of one 8-bit tensor as tables of 256 values (config
    ``relay.QuantizedLookupTables.enabled``)."""
    return function_pass(quantized_lookup_tables_function, opt_level=0, name="QuantizedLookupTables",
                         required=["InferType"], reads_module=False)


__all__ = ["ENABLED_CONFIG", "MIN_OPS", "QuantizedLookupTables", "quantized_lookup_tables_function", "table"]
