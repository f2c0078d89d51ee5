"""Every registered op, compiled: ``build(main = one op call)`` then ``lib(*inputs)`` is
allclose to the reference interpreter (``evaluate``).

Each case is one call of one op on parameters with test shapes chosen to reach the
interesting paths of its lowering: broadcasting, reductions over each axis with and
without keepdims, convolutions and pools in NCHW and in the NHWC/HWIO layout
AlterOpLayout produces, and contractions on both sides of the BLAS threshold
(``passinfra.codegen.gemm.MIN_GEMM_MACS``). Every case builds at opt_level 0 (the op as
written reaches the code generator) and at opt_level 3 (the graph passes run first:
AlterOpLayout turns NCHW convolutions into NHWC ones, SimplifyInference rewrites
batch_norm/dropout, FoldConstant folds zero-argument ops).

Coverage is checked against the registry: an op registered later without a case here, or
without a compute rule and not listed in ``NO_COMPUTE_RULE_EXPECTED``, fails a test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pytest

import passinfra
import passinfra.codegen  # noqa: F401  (attaches the compute rules to the registry)
from passinfra import ir
from passinfra.build import COMPILE_PIPELINE
from passinfra.codegen import gemm
from passinfra.codegen.compute import COMPUTE_ATTR
from passinfra.errors import IRError
from passinfra.ir import op
from passinfra.ir.expr import Expr, Var
from passinfra.ir.op import (
    bitcast,
    bitwise,
    col2im,
    deform_conv,
    extra,
    grid_sample,
    indexing,
    linalg,
    lp_pool,
    max_pool_indices,
    qgemm_panels,
    roi_align,
    signal,
    tfidf,
    tree_ensemble,
    weight_panels,
    winograd_weights,
)
from passinfra.ir.op.matmul_nbits import matmul_nbits
from passinfra.ir.op.requantized import requantized_conv2d, requantized_matmul
from passinfra.ir.type_infer import infer_type
from passinfra.transform import PassContext, Sequential, get_pass

RTOL = ATOL = 1e-5

# ops deliberately without a compute rule, and why; they are the only ops not compiled here
NO_COMPUTE_RULE_EXPECTED = {
    "random.uniform": "stateful: compiled code cannot reproduce the interpreter's NumPy draws",
}


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Input:
    """One parameter of a case: its type and how to draw its values."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    low: float = -3.0
    high: float = 3.0
    kind: str = "uniform"  # uniform | int | nonzero_int | bool

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "bool":
            return np.asarray(rng.random(self.shape) < 0.5)
        if self.kind == "int":
            return np.asarray(rng.integers(int(self.low), int(self.high) + 1, self.shape).astype(self.dtype))
        if self.kind == "nonzero_int":
            magnitude = rng.integers(1, int(self.high) + 1, self.shape)
            sign = np.where(rng.random(self.shape) < 0.5, -1, 1)
            return np.asarray((magnitude * sign).astype(self.dtype))
        return np.asarray(rng.uniform(self.low, self.high, self.shape).astype(self.dtype))


def f32(*shape: int, low: float = -3.0, high: float = 3.0) -> Input:
    return Input(tuple(shape), "float32", low, high)


def f64(*shape: int, low: float = -3.0, high: float = 3.0) -> Input:
    return Input(tuple(shape), "float64", low, high)


def ints(*shape: int, dtype: str = "int32", low: int = -9, high: int = 9) -> Input:
    return Input(tuple(shape), dtype, low, high, "int")


def nonzero(*shape: int, dtype: str = "int32", high: int = 4) -> Input:
    return Input(tuple(shape), dtype, -high, high, "nonzero_int")


def flags(*shape: int) -> Input:
    return Input(tuple(shape), "bool", kind="bool")


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class OpCase:
    """``main(params) = make(params)``, a single call of ``op_name``."""

    op_name: str
    label: str
    make: Callable[[Sequence[Var]], Expr]
    inputs: tuple[Input, ...]

    @property
    def id(self) -> str:
        return f"{self.op_name}[{self.label}]"

    def module(self) -> ir.IRModule:
        params = [ir.var(f"p{i}", spec.shape, spec.dtype) for i, spec in enumerate(self.inputs)]
        return ir.IRModule.from_expr(ir.Function(params, self.make(params)))

    def arrays(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [spec.draw(rng) for spec in self.inputs]


CASES: list[OpCase] = []


def case(op_name: str, label: str, make: Callable[..., Expr], *inputs: Input) -> None:
    CASES.append(OpCase(op_name, label, lambda params: make(*params), tuple(inputs)))


# unary elementwise, on a 3-d tensor; (name, builder, input domain)
_UNARY: list[tuple[str, Callable[[Expr], Expr], Input]] = [
    ("abs", op.abs, f32(2, 3, 5)),
    ("negative", op.negative, f32(2, 3, 5)),
    ("exp", op.exp, f32(2, 3, 5)),
    ("log", op.log, f32(2, 3, 5, low=0.05, high=5.0)),
    ("sqrt", op.sqrt, f32(2, 3, 5, low=0.0, high=5.0)),
    ("tanh", op.tanh, f32(2, 3, 5)),
    ("sigmoid", op.sigmoid, f32(2, 3, 5)),
    ("erf", op.erf, f32(2, 3, 5)),
    ("logical_not", op.logical_not, flags(2, 3, 5)),
    ("nn.relu", op.nn.relu, f32(2, 3, 5)),
    ("nn.gelu", op.nn.gelu, f32(2, 3, 5)),
]
_EXTRA_UNARY: list[tuple[str, Input, dict[str, float]]] = [
    ("floor", f32(2, 3, 5), {}),
    ("ceil", f32(2, 3, 5), {}),
    ("round", f32(2, 3, 5), {}),
    ("sign", f32(2, 3, 5), {}),
    ("reciprocal", f32(2, 3, 5, low=0.25, high=4.0), {}),
    ("sin", f32(2, 3, 5), {}),
    ("cos", f32(2, 3, 5), {}),
    ("tan", f32(2, 3, 5, low=-1.2, high=1.2), {}),
    ("asin", f32(2, 3, 5, low=-0.95, high=0.95), {}),
    ("acos", f32(2, 3, 5, low=-0.95, high=0.95), {}),
    ("atan", f32(2, 3, 5), {}),
    ("sinh", f32(2, 3, 5), {}),
    ("cosh", f32(2, 3, 5), {}),
    ("asinh", f32(2, 3, 5), {}),
    ("acosh", f32(2, 3, 5, low=1.05, high=5.0), {}),
    ("atanh", f32(2, 3, 5, low=-0.9, high=0.9), {}),
    ("nn.softplus", f32(2, 3, 5, low=-20.0, high=20.0), {}),
    ("nn.softsign", f32(2, 3, 5), {}),
    ("nn.leaky_relu", f32(2, 3, 5), {"alpha": 0.2}),
    ("nn.elu", f32(2, 3, 5), {"alpha": 0.7}),
    ("nn.selu", f32(2, 3, 5), {}),
    ("nn.hard_sigmoid", f32(2, 3, 5), {"alpha": 0.3, "beta": 0.4}),
]
for _name, _builder, _spec in _UNARY:
    case(_name, "f32", _builder, _spec)
for _name, _spec, _attrs in _EXTRA_UNARY:
    case(_name, "f32", lambda x, n=_name, a=_attrs: extra.unary(n, x, **a), _spec)
case("exp", "f64", op.exp, f64(4, 3))
case("tanh", "f64", op.tanh, f64(4, 3))
case("abs", "int32", op.abs, ints(3, 4))
case("negative", "int64", op.negative, ints(3, 4, dtype="int64"))
case("sign", "int32", lambda x: extra.unary("sign", x), ints(3, 4))
case("nn.relu", "int32", op.nn.relu, ints(3, 4))
case("clip", "f32", lambda x: op.clip(x, -0.5, 0.7), f32(2, 3, 5))
case("clip", "int32", lambda x: op.clip(x, -2, 3), ints(3, 4))
case("cast", "f32-to-int32", lambda x: op.cast(x, "int32"), f32(3, 4, low=-9.0, high=9.0))
case("cast", "f32-to-f64", lambda x: op.cast(x, "float64"), f32(3, 4))
case("cast", "int64-to-f32", lambda x: op.cast(x, "float32"), ints(3, 4, dtype="int64"))
case("cast", "f32-to-bool", lambda x: op.cast(x, "bool"), Input((3, 4), "float32", -1.0, 1.0, "int"))
case("cast", "bool-to-f32", lambda x: op.cast(x, "float32"), flags(3, 4))
case("nn.dropout", "identity", lambda x: op.nn.dropout(x, 0.3), f32(2, 3, 4))

# binary broadcast ops: same shape, trailing broadcast, both sides broadcast, scalar
_BROADCASTS = {
    "same": ((3, 4), (3, 4)),
    "trailing": ((2, 3, 4), (4,)),
    "both": ((2, 1, 4), (3, 1)),
    "scalar": ((), (3, 4)),
}
_BINARY: list[tuple[str, Callable[[Expr, Expr], Expr], tuple[float, float], tuple[float, float]]] = [
    ("add", op.add, (-3, 3), (-3, 3)),
    ("subtract", op.subtract, (-3, 3), (-3, 3)),
    ("multiply", op.multiply, (-3, 3), (-3, 3)),
    ("divide", op.divide, (-3, 3), (0.25, 4)),
    ("maximum", op.maximum, (-3, 3), (-3, 3)),
    ("minimum", op.minimum, (-3, 3), (-3, 3)),
    ("power", op.power, (0.2, 3), (-2, 2)),
]
for _name, _builder, (_alow, _ahigh), (_blow, _bhigh) in _BINARY:
    for _label, (_ashape, _bshape) in _BROADCASTS.items():
        case(_name, _label, _builder,
             f32(*_ashape, low=_alow, high=_ahigh), f32(*_bshape, low=_blow, high=_bhigh))
case("add", "int32", op.add, ints(2, 3), ints(3))
case("subtract", "int64", op.subtract, ints(2, 3, dtype="int64"), ints(2, 1, dtype="int64"))
case("multiply", "f64", op.multiply, f64(2, 3), f64(1, 3))
case("divide", "int32-truncating", op.divide, ints(3, 4), nonzero(4))
case("divide", "int64-truncating", op.divide, ints(3, 4, dtype="int64"), nonzero(3, 1, dtype="int64"))
case("maximum", "int32", op.maximum, ints(3, 4), ints(4))
case("minimum", "int64", op.minimum, ints(3, 4, dtype="int64"), ints(3, 1, dtype="int64"))
case("power", "int32", op.power, ints(3, 4, low=-3, high=3), ints(4, low=0, high=3))

# comparisons on small ints, so equal elements actually occur
for _name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
    case(_name, "int32-broadcast", getattr(op, _name),
         ints(2, 3, 4, low=-2, high=2), ints(3, 1, low=-2, high=2))
    case(_name, "f32", getattr(op, _name), f32(3, 4), f32(3, 4))
for _name in ("logical_and", "logical_or"):
    case(_name, "broadcast", getattr(op, _name), flags(2, 3, 4), flags(4))
case("where", "broadcast", op.where, flags(3, 1), f32(3, 4), f32(4))
case("where", "int32", op.where, flags(3, 4), ints(3, 4), ints(1))
case("nn.bias_add", "axis1", lambda x, b: op.nn.bias_add(x, b, axis=1), f32(2, 3, 4, 4), f32(3))
case("nn.bias_add", "axis-1", lambda x, b: op.nn.bias_add(x, b, axis=-1), f32(2, 3, 5), f32(5))

# reductions over each axis of a 3-d tensor, keepdims both ways, plus all axes and a pair
_REDUCE_AXES: list[tuple[str, object]] = [
    ("all", None), ("0", 0), ("1", 1), ("2", 2), ("-1", -1), ("0,2", (0, 2)),
]
_REDUCE_DOMAIN = {"prod": (0.5, 1.5)}
for _name in ("sum", "mean", "max", "min", "prod"):
    _builder = extra.prod if _name == "prod" else getattr(op, _name)
    _low, _high = _REDUCE_DOMAIN.get(_name, (-3.0, 3.0))
    for _label, _axis in _REDUCE_AXES:
        for _keep in (False, True):
            case(_name, f"axis={_label},keepdims={_keep}",
                 lambda x, b=_builder, a=_axis, k=_keep: b(x, axis=a, keepdims=k),
                 f32(2, 3, 4, low=_low, high=_high))
case("sum", "int32", lambda x: op.sum(x, axis=1), ints(2, 3, 4))
case("max", "int64", lambda x: op.max(x, axis=0, keepdims=True), ints(2, 3, 4, dtype="int64"))
for _name in ("argmax", "argmin"):
    for _axis in (0, 1, 2, -1):
        for _keep in (False, True):
            case(_name, f"axis={_axis},keepdims={_keep}",
                 lambda x, n=_name, a=_axis, k=_keep: getattr(extra, n)(x, axis=a, keepdims=k), f32(2, 3, 4))
    # ties (small ints): first vs last index of the extreme
    for _last in (False, True):
        case(_name, f"ties,select_last_index={_last}",
             lambda x, n=_name, s=_last: getattr(extra, n)(x, axis=1, select_last_index=s),
             ints(3, 6, low=-1, high=1))
for _axis in (-1, 0, 1):
    case("nn.softmax", f"axis={_axis}", lambda x, a=_axis: op.nn.softmax(x, axis=a),
         f32(2, 3, 4, low=-5.0, high=5.0))
case("nn.layer_norm", "axis=-1", lambda x, g, b: op.nn.layer_norm(x, g, b), f32(2, 3, 8), f32(8), f32(8))
case("nn.layer_norm", "axis=1", lambda x, g, b: op.nn.layer_norm(x, g, b, axis=1, epsilon=1e-3),
     f32(2, 3, 4), f32(3), f32(3))
case("nn.batch_norm", "axis=1", lambda x, g, b, m, v: op.nn.batch_norm(x, g, b, m, v),
     f32(2, 3, 4, 4), f32(3), f32(3), f32(3), f32(3, low=0.5, high=2.0))
case("nn.batch_norm", "axis=-1", lambda x, g, b, m, v: op.nn.batch_norm(x, g, b, m, v, axis=-1, epsilon=1e-3),
     f32(2, 5, 3), f32(3), f32(3), f32(3), f32(3, low=0.5, high=2.0))
# the inference form models use: SimplifyInference rewrites this into elementwise ops
case("nn.batch_norm", "first-field",
     lambda x, g, b, m, v: ir.TupleGetItem(op.nn.batch_norm(x, g, b, m, v), 0),
     f32(2, 3, 4, 4), f32(3), f32(3), f32(3), f32(3, low=0.5, high=2.0))
case("nn.lrn", "size=3", lambda x: extra.lrn(x, 3, alpha=1e-2, beta=0.75, bias=2.0), f32(1, 5, 4, 4))

# data movement
case("reshape", "merge", lambda x: op.reshape(x, (6, 4)), f32(2, 3, 4))
case("reshape", "infer", lambda x: op.reshape(x, (4, -1, 2)), f32(2, 3, 4))
case("transpose", "reverse", op.transpose, f32(2, 3, 4))
case("transpose", "axes", lambda x: op.transpose(x, (1, 2, 0)), f32(2, 3, 4))
case("concatenate", "axis0", lambda a, b: op.concatenate([a, b], axis=0), f32(2, 3), f32(4, 3))
case("concatenate", "axis-1", lambda a, b, c: op.concatenate([a, b, c], axis=-1),
     f32(2, 1), f32(2, 3), f32(2, 2))
case("split", "sections", lambda x: op.split(x, 3, axis=1), f32(2, 6, 2))
case("split", "indices", lambda x: op.split(x, (1, 3), axis=-1), f32(2, 3, 5))
case("squeeze", "all", op.squeeze, f32(1, 3, 1, 4))
case("squeeze", "axis", lambda x: op.squeeze(x, axis=(2,)), f32(1, 3, 1, 4))
case("expand_dims", "middle", lambda x: op.expand_dims(x, 1, num_newaxis=2), f32(2, 3))
case("expand_dims", "end", lambda x: op.expand_dims(x, -1), f32(2, 3))
case("take", "axis0", lambda x, i: op.take(x, i, axis=0), f32(5, 3), ints(2, 4, dtype="int64", low=0, high=4))
case("take", "axis1", lambda x, i: op.take(x, i, axis=1), f32(2, 4, 3), ints(3, low=0, high=3))
case("take", "flat", lambda x, i: op.take(x, i), f32(2, 3), ints(4, dtype="int64", low=0, high=5))
# (8-bit codes into a table of 256: QuantizedLookupTables')
case("take", "codes", lambda x, i: op.take(x, i, axis=0), f32(256), ints(21, dtype="uint8", low=0, high=255))
case("broadcast_to", "expand", lambda x: extra.broadcast_to(x, (2, 3, 4)), f32(3, 1))
case("tile", "reps", lambda x: extra.tile(x, (2, 3)), f32(2, 3))
case("strided_slice", "steps", lambda x: extra.strided_slice(x, (5, 6), (0, 1), (1, -1), (5, 0), (2, -2)),
     f32(5, 6))
case("strided_slice", "one-axis", lambda x: extra.strided_slice(x, (2, 5, 3), (1,), (1,), (4,), (1,)),
     f32(2, 5, 3))
case("pad", "constant", lambda x: extra.pad(x, ((1, 0), (2, 1)), pad_value=1.5), f32(2, 3))
for _mode in ("edge", "reflect", "wrap"):
    case("pad", _mode, lambda x, m=_mode: extra.pad(x, ((1, 2), (2, 1)), mode=m), f32(3, 4))
case("pad", "crop", lambda x: extra.pad(x, ((-1, 1), (0, -2))), f32(3, 4))
case("trilu", "upper", lambda x: extra.trilu(x, k=1, upper=True), f32(2, 4, 5))
case("trilu", "lower", lambda x: extra.trilu(x, k=-1, upper=False), f32(2, 4, 5))
case("full", "scalar-fill", lambda v: op.full(v, (2, 3)), f32())
case("full", "cast-fill", lambda v: op.full(v, (3, 2), "float64"), f32())
case("zeros", "f32", lambda: op.zeros((2, 3)))
case("ones", "int32", lambda: op.ones((3, 2), "int32"))
case("arange", "int64", lambda: extra.arange(7, start=-2, step=3))
case("arange", "int32-down", lambda: extra.arange(-4, start=5, step=-2, dtype="int32"))

# contractions below and above the BLAS threshold (checked by test_gemm_cases_straddle_the_threshold)
SMALL_MATMULS = {
    "2d": ((2, 3), (3, 4)),
    "batched": ((2, 3, 4), (2, 4, 5)),
    "broadcast-batch": ((2, 1, 3, 4), (3, 4, 2)),
    "vector-lhs": ((4,), (2, 4, 3)),
    "vector-rhs": ((2, 3, 4), (4,)),
}
LARGE_MATMULS = {
    "2d-blas": ((32, 32), (32, 48)),
    "batched-lhs-blas": ((2, 16, 32), (32, 40)),
    "batched-blas": ((2, 16, 32), (2, 32, 24)),
    "broadcast-batch-blas": ((1, 16, 32), (3, 32, 24)),
}
SMALL_DENSES = {"2d": ((2, 3), (4, 3)), "3d": ((2, 3, 5), (4, 5))}
LARGE_DENSES = {"2d-blas": ((16, 64), (32, 64)), "3d-blas": ((2, 8, 64), (32, 64))}
for _label, (_a, _b) in {**SMALL_MATMULS, **LARGE_MATMULS}.items():
    case("matmul", _label, op.matmul, f32(*_a, low=-1, high=1), f32(*_b, low=-1, high=1))
for _label, (_a, _b) in {**SMALL_DENSES, **LARGE_DENSES}.items():
    case("nn.dense", _label, op.nn.dense, f32(*_a, low=-1, high=1), f32(*_b, low=-1, high=1))
case("matmul", "int32", op.matmul, ints(2, 3, low=-3, high=3), ints(3, 4, low=-3, high=3))

# convolutions: (data, weight, keyword arguments); NCHW/OIHW ones become NHWC at opt_level 3
NCHW_CONVS = {
    "3x3-pad": ((1, 3, 8, 8), (4, 3, 3, 3), {"padding": (1, 1)}),
    "stride-dilation": ((2, 3, 9, 9), (4, 3, 3, 3), {"strides": (2, 2), "dilation": (2, 2)}),
    "asym-pad": ((1, 2, 6, 7), (3, 2, 2, 3), {"padding": (1, 0, 0, 2)}),
    "groups": ((1, 4, 6, 6), (6, 2, 3, 3), {"groups": 2, "padding": (1, 1)}),
    "depthwise": ((1, 4, 6, 6), (4, 1, 3, 3), {"groups": 4}),
    "1x1-blas": ((1, 32, 8, 8), (32, 32, 1, 1), {}),
    "3x3-blas": ((2, 8, 12, 12), (16, 8, 3, 3), {"padding": (1, 1), "strides": (1, 1)}),
    "strided-blas": ((1, 16, 16, 16), (16, 16, 3, 3), {"strides": (2, 2), "padding": (1, 1)}),
}
NHWC_CONVS = {
    "3x3-pad": ((1, 8, 8, 3), (3, 3, 3, 4), {"padding": (1, 1)}),
    "stride-asym": ((2, 9, 7, 3), (2, 3, 3, 5), {"strides": (2, 1), "padding": (0, 1, 1, 0)}),
    "3x3-blas": ((2, 12, 12, 8), (3, 3, 8, 16), {"padding": (1, 1)}),
    "1x1-blas": ((1, 8, 8, 32), (1, 1, 32, 32), {}),
}
for _label, (_data, _weight, _kw) in NCHW_CONVS.items():
    case("nn.conv2d", f"NCHW-{_label}", lambda x, w, k=_kw: op.nn.conv2d(x, w, **k),
         f32(*_data, low=-1, high=1), f32(*_weight, low=-1, high=1))
for _label, (_data, _weight, _kw) in NHWC_CONVS.items():
    case("nn.conv2d", f"NHWC-{_label}",
         lambda x, w, k=_kw: op.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="HWIO", **k),
         f32(*_data, low=-1, high=1), f32(*_weight, low=-1, high=1))
case("nn.conv2d_transpose", "stride2", lambda x, w: extra.conv2d_transpose(
    x, w, strides=(2, 2), padding=(1, 1, 1, 1), output_padding=(1, 1)), f32(1, 4, 5, 5), f32(4, 2, 3, 3))
case("nn.conv2d_transpose", "groups-dilation", lambda x, w: extra.conv2d_transpose(
    x, w, dilation=(2, 1), groups=2), f32(1, 4, 4, 4), f32(4, 3, 2, 2))

# pools in both layouts
for _layout, _shape in (("NCHW", (2, 3, 7, 6)), ("NHWC", (2, 7, 6, 3))):
    case("nn.max_pool2d", _layout, lambda x, lay=_layout: op.nn.max_pool2d(
        x, (3, 2), strides=(2, 1), padding=(1, 1), layout=lay), f32(*_shape))
    for _include in (False, True):
        case("nn.avg_pool2d", f"{_layout}-count_include_pad={_include}",
             lambda x, lay=_layout, inc=_include: op.nn.avg_pool2d(
                 x, (3, 3), strides=(2, 2), padding=(1, 1), layout=lay, count_include_pad=inc), f32(*_shape))
    case("nn.global_avg_pool2d", _layout, lambda x, lay=_layout: op.nn.global_avg_pool2d(x, layout=lay),
         f32(*_shape))
case("nn.max_pool2d_dilated", "dilated", lambda x: extra.max_pool2d_ext(
    x, (2, 2), strides=(1, 2), padding=(1, 0, 0, 1), dilation=(2, 2)), f32(1, 2, 7, 7))

# 3-D windows (NCDHW): groups, dilation, asymmetric padding, ceil mode, both divisors
case("nn.conv3d", "groups-dilation-pad", lambda x, w: op.nn.conv3d(
    x, w, strides=(1, 2, 1), padding=(1, 0, 1, 0, 1, 1), dilation=(2, 1, 1), groups=2),
    f32(1, 4, 5, 6, 5, low=-1, high=1), f32(4, 2, 2, 3, 2, low=-1, high=1))
case("nn.conv3d_transpose", "stride-groups", lambda x, w: op.nn.conv3d_transpose(
    x, w, strides=(2, 1, 2), padding=(1, 0, 0, 0, 1, 1), output_padding=(1, 0, 0), dilation=(1, 2, 1),
    groups=2), f32(1, 4, 3, 4, 3), f32(4, 1, 2, 2, 3))
case("nn.max_pool3d", "ceil-dilated", lambda x: op.nn.max_pool3d(
    x, (2, 3, 2), strides=(2, 2, 1), padding=(0, 1, 1, 1, 1, 0), dilation=(1, 1, 2), ceil_mode=True),
    f32(1, 2, 5, 6, 7))
# ties (few distinct values) so that the first max must win; column-major flat positions
case("nn.max_pool_indices", "2d-ties-pads-dilated", lambda x: max_pool_indices.max_pool_indices(
    x, (3, 2), strides=(2, 1), padding=(1, 0, 1, 1), dilation=(1, 2)), ints(2, 2, 6, 7, low=0, high=2))
case("nn.max_pool_indices", "3d-ceil-column-major", lambda x: max_pool_indices.max_pool_indices(
    x, (2, 2, 3), strides=(2, 2, 2), padding=(0, 1, 1, 1, 0, 1), dilation=(1, 1, 1), ceil_mode=True,
    storage_order=1), f32(1, 2, 5, 6, 7))
case("nn.lp_pool2d", "p3-ceil-dilated", lambda x: lp_pool.lp_pool(
    x, 2, 3, (2, 3), strides=(2, 1), padding=(1, 0, 0, 1), dilation=(1, 2), ceil_mode=True), f32(1, 2, 6, 7))
case("nn.lp_pool3d", "p2-padded", lambda x: lp_pool.lp_pool(
    x, 3, 2, (2, 2, 2), strides=(1, 2, 2), padding=(0, 1, 1, 1, 0, 1), dilation=(1, 1, 1)),
    f32(1, 2, 4, 5, 5))
for _include in (False, True):
    case("nn.avg_pool3d", f"ceil-count_include_pad={_include}", lambda x, inc=_include: op.nn.avg_pool3d(
        x, (3, 2, 2), strides=(2, 2, 2), padding=(1, 1, 0, 1, 0, 1), dilation=(1, 2, 1), ceil_mode=True,
        count_include_pad=inc), f32(1, 2, 5, 6, 7))

# resize: every way a table is built (rounding, 2 and 4 taps, renormalized, antialias window)
_RESIZES = {
    "nearest-ties": ((2, 3, 8, 6), (2, 3, 4, 12), {"mode": "nearest"}),
    "nearest-crop-int": ((2, 3, 8, 6), (2, 3, 5, 4), {"mode": "nearest",
                                                      "roi": (0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3),
                                                      "coordinate_transformation_mode": "tf_crop_and_resize",
                                                      "extrapolation_value": 7.0}),
    "linear-align": ((2, 3, 8, 6), (2, 3, 11, 4), {"mode": "linear",
                                                   "coordinate_transformation_mode": "align_corners"}),
    "cubic-exclude": ((1, 2, 6, 7), (1, 2, 9, 5), {"mode": "cubic", "exclude_outside": True}),
    "linear-antialias": ((1, 2, 9, 10), (1, 2, 4, 3), {"mode": "linear", "antialias": True}),
}
for _label, (_in, _out, _kw) in _RESIZES.items():
    _scales = tuple(o / i for o, i in zip(_out, _in))
    _input = ints(*_in, low=-50, high=50) if _label.endswith("-int") else f32(*_in)
    case("resize", _label, lambda x, o=_out, s=_scales, k=_kw: op.resize.resize(x, o, s, **k), _input)

# sampling: taps outside the data (zeros, reflection folds), cubic's 16 taps, 3-D; rois
# partly outside the data, a reversed one, the adaptive (run-time) sample grid
case("grid_sample", "linear-zeros", lambda x, g: grid_sample.grid_sample(x, g), f32(2, 3, 5, 4),
     f32(2, 3, 4, 2, low=-1.4, high=1.4))
case("grid_sample", "cubic-reflection-align", lambda x, g: grid_sample.grid_sample(
    x, g, mode="cubic", padding_mode="reflection", align_corners=True), f32(1, 2, 5, 4), f32(1, 3, 4, 2))
case("grid_sample", "nearest-border-3d", lambda x, g: grid_sample.grid_sample(
    x, g, mode="nearest", padding_mode="border"), f32(1, 2, 3, 4, 5), f32(1, 2, 3, 4, 3, low=-1.5, high=1.5))
case("roi_align", "avg-adaptive", lambda x, r, b: roi_align.roi_align(
    x, r, b, output_height=3, output_width=2),
     f32(2, 3, 8, 7), f32(4, 4, low=-2.0, high=9.0), ints(4, dtype="int64", low=0, high=1))
case("roi_align", "max-ratio2", lambda x, r, b: roi_align.roi_align(
    x, r, b, mode="max", output_height=2, output_width=3, sampling_ratio=2, spatial_scale=0.5,
    coordinate_transformation_mode="output_half_pixel"), f32(2, 3, 8, 7), f32(4, 4, low=-2.0, high=16.0),
    ints(4, dtype="int64", low=0, high=1))
case("col2im", "strided-dilated-padded", lambda x: col2im.col2im(
    x, (6, 5), (2, 2), dilations=(1, 2), pads=(1, 0, 1, 2), strides=(2, 3)), f32(2, 12, 8))
# deform_conv: offsets reaching past the image (zero taps), groups with offset groups and a
# mask; strided, dilated and padded with a bias
case("deform_conv", "grouped-masked", lambda x, w, o, b, m: deform_conv.deform_conv(
    x, w, o, b, m, group=2, offset_group=2), f32(2, 4, 5, 6), f32(6, 2, 2, 3),
     f32(2, 24, 4, 4, low=-4.0, high=4.0), f32(6), f32(2, 12, 4, 4, low=0.0, high=1.0))
case("deform_conv", "strided-dilated-padded", lambda x, w, o, b: deform_conv.deform_conv(
    x, w, o, b, strides=(2, 1), pads=(1, 0, 2, 1), dilations=(1, 2)), f32(1, 3, 6, 5), f32(2, 3, 3, 2),
     f32(1, 12, 4, 4, low=-2.5, high=2.5), f32(2))
# tree_ensemble: comparisons of every mode, a member set, NaN tracking true, a one-leaf
# tree, min aggregation with an unreached target; tfidf: uni- and bigrams with skips
_TREES = dict(n_targets=3, roots=[0, -4], features=[0, 1, 2, 0], modes=["leq", "member", "gt", "neq"],
              splits=[0.5, 0.0, -1.0, 2.0], true_children=[1, -1, -2, -3], false_children=[2, 3, -3, -2],
              leaf_targets=[0, 1, 0, 1], leaf_weights=[1.5, -2.0, 3.0, 0.25],
              members=[(), (1.0, -1.0), (), ()], missing_true=[True, False, False, False])
case("tree_ensemble", "sum", lambda x: tree_ensemble.tree_ensemble(x, **_TREES),
     f32(6, 3, low=-2.0, high=2.0))
case("tree_ensemble", "min-f64", lambda x: tree_ensemble.tree_ensemble(x, aggregate="min", **_TREES),
     f64(5, 3, low=-2.0, high=2.0))
case("tfidf_vectorizer", "tfidf-skip2", lambda x: tfidf.tfidf_vectorizer(
    x, [(2,), (3,), (2, 3), (3, 2), (1, 1)], [0, 1, 2, 3, 4], 6, 1, 2, max_skip_count=2, mode="TFIDF",
    weights=[0.5, 1.0, 2.0, 1.5, 3.0, 1.0]), ints(2, 9, dtype="int64", low=0, high=3))

# indexing, scans and integer arithmetic (negative indices, duplicate scatter targets, ties)
case("gather_elements", "axis1", lambda x, i: indexing.gather_elements(x, i, axis=1), f32(3, 5),
     ints(3, 4, dtype="int64", low=-5, high=4))
case("gather_nd", "batch1", lambda x, i: indexing.gather_nd(x, i, batch_dims=1), f32(2, 3, 4),
     ints(2, 2, 1, dtype="int64", low=-3, high=2))
case("scatter_elements", "add", lambda x, i, u: indexing.scatter_elements(x, i, u, reduction="add"),
     f32(4, 3), ints(5, 3, dtype="int64", low=-4, high=3), f32(5, 3))
case("scatter_nd", "max", lambda x, i, u: indexing.scatter_nd(x, i, u, reduction="max"), f32(4, 3),
     ints(5, 1, dtype="int64", low=-4, high=3), f32(5, 3))
case("topk", "largest", lambda x: indexing.topk(x, 3, axis=1), f32(3, 7))
case("cumsum", "exclusive-reverse", lambda x: indexing.cumsum(x, axis=1, exclusive=True, reverse=True),
     f32(3, 5))
case("cumprod", "int32", lambda x: indexing.cumprod(x, axis=0), ints(4, 3, low=-3, high=3))
case("mod", "int32", indexing.mod, ints(3, 4), nonzero(4))
case("floor_mod", "f32", indexing.floor_mod, f32(3, 4), f32(4, low=0.5, high=3.0))
case("left_shift", "int64", indexing.left_shift, ints(4, 8, dtype="int64", low=-1000, high=1000),
     ints(8, dtype="int64", low=-2, high=66))
case("right_shift", "int32", indexing.right_shift, ints(4, 8, low=-1000, high=1000), ints(8, low=-2, high=34))
case("bitwise_and", "int8", bitwise.bitwise_and, ints(3, 4, dtype="int8", low=-128, high=127),
     ints(4, dtype="int8", low=-128, high=127))
case("bitwise_or", "uint16", bitwise.bitwise_or, ints(3, 4, dtype="uint16", low=0, high=65535),
     ints(3, 4, dtype="uint16", low=0, high=65535))
case("bitwise_xor", "int64", bitwise.bitwise_xor, ints(3, 4, dtype="int64", low=-10**6, high=10**6),
     ints(3, 1, dtype="int64", low=-10**6, high=10**6))
case("bitwise_not", "uint8", bitwise.bitwise_not, ints(3, 4, dtype="uint8", low=0, high=255))

# bitcast: float bits as integers (16-bit floats through their float32 form), bytes as bool;
# det: batched LU with pivoting; dft: complex onesided forward, zero-padded real inverse,
# the irfft's Hermitian weights, cut to fewer points than the data holds
case("bitcast", "f32-to-i32", lambda x: bitcast.bitcast(x, "int32"), f32(3, 4))
case("bitcast", "f16-to-i16", lambda x: bitcast.bitcast(x, "int16"), Input((3, 4), "float16"))
case("bitcast", "u16-to-bf16", lambda x: bitcast.bitcast(x, "bfloat16"),
     ints(3, 4, dtype="uint16", low=0, high=32000))
case("bitcast", "u8-to-bool", lambda x: bitcast.bitcast(x, "bool"), ints(3, 4, dtype="uint8", low=0, high=3))
case("bitcast", "bool-to-i8", lambda x: bitcast.bitcast(x, "int8"), flags(3, 4))
# weight_panels.unpack: a conv weight of 70 channels from three panels of 32 (zeros past 70)
case("weight_panels.unpack", "hwio-70", lambda x: weight_panels.unpack(x, (3, 3, 5, 70)), f32(3, 45, 32))
# winograd_weights.unpack: a 3x3 weight of 45 channels from its F(2x2, 3x3) transform (two
# panels of 32: its adds L U L^T, any transform values)
case("winograd_weights.unpack", "hwio-45", lambda x: winograd_weights.unpack(x, (3, 3, 5, 45)),
     f32(2, 80, 32))
case("det", "batched-4x4", linalg.det, f32(2, 3, 4, 4))
case("det", "f64-5x5", linalg.det, f64(5, 5))
case("dft", "complex-onesided", lambda x: signal.dft(x, 8, "float32", axis=1, onesided=True), f32(2, 6, 3, 2))
case("dft", "real-inverse-padded-f64", lambda x: signal.dft(x, 7, "float64", axis=0, inverse=True),
     f64(5, 2, 1))
case("dft", "irfft-cut", lambda x: signal.dft(x, 6, "float32", axis=2, inverse=True, onesided=True),
     f32(2, 3, 5, 2))

# quantization: per-axis parameters, saturation (values far outside the range), int32
# accumulation of 8-bit products with zero points, padding that holds the zero point
case("qnn.quantize", "per-axis-int8", op.qnn.quantize, f32(2, 3, 4, low=-90.0, high=90.0),
     f32(3, 1, low=0.2, high=1.0), ints(3, 1, dtype="int8", low=-10, high=10))
case("qnn.dequantize", "per-axis-uint8", op.qnn.dequantize, ints(2, 3, 4, dtype="uint8", low=0, high=255),
     f32(3, 1, low=0.01, high=0.1), ints(3, 1, dtype="uint8", low=0, high=255))
case("qnn.requantize", "per-column-uint8", op.qnn.requantize, ints(4, 6, low=-30000, high=30000),
     f32(6, low=0.001, high=0.02), ints(dtype="uint8", low=100, high=150))
case("qnn.matmul", "u8s8-batched", op.qnn.matmul, ints(2, 3, 5, dtype="uint8", low=0, high=255),
     ints(5, 4, dtype="int8", low=-128, high=127), ints(dtype="uint8", low=0, high=255),
     ints(4, dtype="int8", low=-128, high=127))
# a batched right operand: not the integer GEMM's (a weight without batch axes), the loop nest
case("qnn.matmul", "s8u8-batched-rhs", op.qnn.matmul, ints(2, 3, 5, dtype="int8", low=-128, high=127),
     ints(2, 5, 4, dtype="uint8", low=0, high=255), ints(dtype="int8", low=-128, high=127),
     ints(dtype="uint8", low=0, high=255))
# qgemm_panels.unpack: a uint8 [6, 35] weight from two panels of 32 columns, k in groups of
# 4 (2 groups: k padded to 8, then a group of the columns' sums and one of the flag); a
# grouped int8 weight of 2 groups of 12 columns from narrow panels of 16
case("qgemm_panels.unpack", "u8-6x35", lambda x: qgemm_panels.unpack(x, (6, 35), "uint8"),
     ints(2, 4, 32, 4, dtype="int8", low=-128, high=127))
case("qgemm_panels.unpack", "i8-groups-narrow",
     lambda x: qgemm_panels.unpack(x, (3, 3, 1, 24), "int8", groups=2),
     ints(2, 5, 16, 4, dtype="int8", low=-128, high=127))
case("qnn.matmul_nbits", "4-bit-rows-tail",  # K = 40: the second block of 32 codes half padding
     lambda a, codes, scales, zeros: matmul_nbits(a, codes, scales, zeros, bits=4, block_size=32),
     f32(3, 40), ints(5, 2, 16, dtype="uint8", low=0, high=255), f32(5, 2, low=0.01, high=0.1),
     ints(5, 2, dtype="uint8", low=0, high=15))
case("qnn.conv2d", "padded-grouped",
     lambda d, w, zd, zw: op.qnn.conv2d(d, w, zd, zw, strides=(2, 1), padding=(1, 2, 0, 1), dilation=(1, 2),
                                        groups=2),
     ints(1, 4, 7, 6, dtype="uint8", low=0, high=255), ints(6, 2, 3, 3, dtype="int8", low=-128, high=127),
     ints(dtype="uint8", low=0, high=255), ints(6, 1, 1, 1, dtype="int8", low=-8, high=8))
# a contraction with its requantize (RequantizeInKernels' fusion): the integer GEMM's
# requantizing epilogue, per-column bias and multiplier, into int8 / uint8
case("qnn.requantized_conv2d", "nhwc-grouped-int8",
     lambda d, w, zd, zw, b, m, zo: requantized_conv2d(d, w, zd, zw, b, m, zo, strides=(1, 2),
                                                       padding=(1, 1, 1, 1), groups=2, data_layout="NHWC",
                                                       kernel_layout="HWIO"),
     ints(1, 5, 7, 16, dtype="uint8", low=0, high=255), ints(3, 3, 8, 20, dtype="int8", low=-128, high=127),
     ints(dtype="uint8", low=0, high=255), ints(1, 1, 1, 20, dtype="int8", low=-8, high=8),
     ints(1, 1, 1, 20, low=-2000, high=2000), f32(1, 1, 1, 20, low=0.0005, high=0.003),
     ints(dtype="int8", low=-5, high=5))
case("qnn.requantized_matmul", "u8-per-tensor", requantized_matmul,
     ints(6, 40, dtype="uint8", low=0, high=255), ints(40, 9, dtype="int8", low=-128, high=127),
     ints(dtype="uint8", low=0, high=255), ints(dtype="int8", low=0, high=0), ints(9, low=-900, high=900),
     f32(low=0.001, high=0.002), ints(dtype="uint8", low=100, high=150))
for _name, _dtype, _low, _high in (("qnn.add", "int8", -128, 127), ("qnn.mul", "uint8", 0, 255)):
    case(_name, f"broadcast-{_dtype}", getattr(op.qnn, _name[4:]),
         ints(3, 4, dtype=_dtype, low=_low, high=_high),
         f32(low=0.01, high=0.05), ints(dtype=_dtype, low=_low // 8, high=_high // 8),
         ints(4, dtype=_dtype, low=_low, high=_high), f32(low=0.01, high=0.05),
         ints(dtype=_dtype, low=_low // 8, high=_high // 8), f32(low=0.02, high=0.08),
         ints(dtype=_dtype, low=_low // 8, high=_high // 8))
case("qnn.dynamic_quantize", "f32", op.qnn.dynamic_quantize, f32(3, 5))
# rows of 16 lanes each and a tail (the range pass over rows on threads); more rows than
# RANGE_MAX_ROWS share one set of lanes
case("qnn.dynamic_quantize", "row-lanes", op.qnn.dynamic_quantize, f32(2, 20, 37))
case("qnn.dynamic_quantize", "shared-lanes", op.qnn.dynamic_quantize, f32(300, 16))


# --------------------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="session")
def codegen_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("codegen_cache"))


@pytest.fixture
def codegen_ctx(codegen_cache_dir: str):
    with PassContext(config={"codegen.cache_dir": codegen_cache_dir}) as ctx:
        yield ctx


def assert_outputs_close(got: object, expected: object, rtol: float = RTOL, atol: float = ATOL) -> None:
    """Tensors compared with allclose (shape and dtype too), tuples element-wise."""
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected), f"not a {len(expected)}-tuple: {got!r}"
        for got_field, expected_field in zip(got, expected):
            assert_outputs_close(got_field, expected_field, rtol, atol)
        return
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------- tests


def _project_ops() -> list:
    """The ops raypass itself registers (other test files register private ops too,
    into the same global registry)."""
    return [o for o in ir.list_ops() if o.impl.__module__.startswith("passinfra.")]


def test_only_the_expected_ops_lack_a_compute_rule():
    without_rule = {o.name for o in _project_ops() if o.get_attr(COMPUTE_ATTR) is None}
    assert without_rule == set(NO_COMPUTE_RULE_EXPECTED)


def test_building_an_op_without_a_compute_rule_names_it(codegen_ctx: PassContext):
    mod = ir.IRModule.from_expr(ir.Function([], op.random.uniform(-1.0, 1.0, (2, 3))))
    with pytest.raises(IRError, match=r"op random\.uniform has no compute rule: it is stateful"):
        passinfra.build(mod)


def test_every_op_with_a_compute_rule_has_a_case():
    registered = {o.name for o in _project_ops()}
    covered = {c.op_name for c in CASES}
    assert covered == registered - set(NO_COMPUTE_RULE_EXPECTED)


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


def graph_passes_rewrite(op_case: OpCase) -> bool:
    """Whether the graph-level part of an opt_level 3 build (everything before FuseOps)
    leaves no call of the case's op with the case's attrs: then the op as written only
    reaches the code generator in an opt_level 0 build."""
    graph_part = COMPILE_PIPELINE[: COMPILE_PIPELINE.index("FuseOps")]
    mod = op_case.module()
    written = next(iter_calls(mod["main"].body))
    assert written.op.name == op_case.op_name, op_case.id
    with PassContext(opt_level=3):
        optimized = Sequential([get_pass(name) for name in graph_part])(mod)
    return not any(call.op == written.op and call.attrs == written.attrs
                   for call in iter_calls(optimized["main"].body))


def iter_calls(body: Expr) -> Iterator[ir.Call]:
    for node in ir.iter_post_order(body):
        if isinstance(node, ir.Call) and isinstance(node.op, ir.Op):
            yield node


# every case at the default opt_level 3; at 0 too where the graph passes rewrite the op
# (AlterOpLayout on NCHW convolutions, SimplifyInference, FoldConstant on constant ops)
BUILDS = [(c, 3) for c in CASES] + [(c, 0) for c in CASES if graph_passes_rewrite(c)]


def test_opt_level_0_builds_cover_the_ops_the_graph_passes_rewrite():
    rewritten = {c.op_name for c, level in BUILDS if level == 0}
    assert {"nn.conv2d", "nn.batch_norm", "nn.dropout"} <= rewritten


@pytest.mark.parametrize(("op_case", "opt_level"), BUILDS, ids=[f"{c.id}-O{level}" for c, level in BUILDS])
def test_compiled_op_matches_interpreter(op_case: OpCase, opt_level: int, codegen_ctx: PassContext):
    mod = op_case.module()
    inputs = op_case.arrays()
    expected = passinfra.evaluate(mod, *inputs)
    lib = passinfra.build(mod, opt_level=opt_level)
    assert_outputs_close(lib(*inputs), expected)


def _contraction_plan(op_name: str, lhs: tuple[int, ...], rhs: tuple[int, ...], **conv_kw: object):
    """The GEMM plan the lowering would pick for this call (None: a plain loop nest)."""
    a, b = ir.var("a", lhs), ir.var("b", rhs)
    builders = {"matmul": op.matmul, "nn.dense": op.nn.dense, "nn.conv2d": op.nn.conv2d}
    call = builders[op_name](a, b, **conv_kw)
    out_type = infer_type(ir.Function([a, b], call)).ret_type
    return gemm.plan_contraction(op_name, call.attrs, (lhs, rhs), "float32", tuple(out_type.shape))


def test_gemm_cases_straddle_the_threshold():
    """The premise of the contraction cases: "small" ones stay loop nests, "-blas" ones are
    planned as GEMMs (so both code paths are compared with the interpreter)."""
    for lhs, rhs in SMALL_MATMULS.values():
        assert _contraction_plan("matmul", lhs, rhs) is None, (lhs, rhs)
    for lhs, rhs in LARGE_MATMULS.values():
        assert _contraction_plan("matmul", lhs, rhs) is not None, (lhs, rhs)
    for lhs, rhs in SMALL_DENSES.values():
        assert _contraction_plan("nn.dense", lhs, rhs) is None, (lhs, rhs)
    for lhs, rhs in LARGE_DENSES.values():
        assert _contraction_plan("nn.dense", lhs, rhs) is not None, (lhs, rhs)
    for label, (data, weight, kw) in NCHW_CONVS.items():
        planned = _contraction_plan("nn.conv2d", data, weight, **kw) is not None
        assert planned == label.endswith("-blas"), label
    assert gemm.blas_library() is not None, "scipy-openblas32 is a dependency: the BLAS path must be compiled"


def test_alter_op_layout_turns_every_nchw_conv_case_into_nhwc():
    """The premise of the opt_level 3 builds of the NCHW conv cases: the graph that reaches
    the code generator holds an NHWC/HWIO conv2d, not the NCHW one written."""
    conv_cases = [c for c in CASES if c.op_name == "nn.conv2d" and c.label.startswith("NCHW")]
    assert len(conv_cases) == len(NCHW_CONVS)
    for conv_case in conv_cases:
        with PassContext(opt_level=3):
            altered = get_pass("AlterOpLayout")(conv_case.module())
        layouts = _conv_layouts(altered["main"].body)
        assert layouts == [("NHWC", "HWIO")], conv_case.id


def _conv_layouts(body: Expr) -> list[tuple[str, str]]:
    return [(call.attrs["data_layout"], call.attrs["kernel_layout"])
            for call in iter_calls(body) if call.op.name == "nn.conv2d"]


def test_conv_pool_chain_in_the_layout_alter_op_layout_produces(codegen_ctx: PassContext):
    """conv2d -> bias_add -> relu -> max_pool2d -> avg_pool2d -> global_avg_pool2d: at
    opt_level 3 the whole chain runs in NHWC (pools with layout NHWC) and still matches."""
    x, w, b = ir.var("x", (2, 3, 10, 10)), ir.var("w", (8, 3, 3, 3)), ir.var("b", (8,))
    y = op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, w, padding=(1, 1)), b))
    y = op.nn.avg_pool2d(op.nn.max_pool2d(y, (2, 2), strides=(2, 2)), (3, 3), padding=(1, 1))
    mod = ir.IRModule.from_expr(ir.Function([x, w, b], op.nn.global_avg_pool2d(y)))
    with PassContext(opt_level=3):
        altered = get_pass("AlterOpLayout")(mod)
    pool_names = {"nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d"}
    pool_layouts = {call.op.name: call.attrs["layout"]
                    for call in iter_calls(altered["main"].body) if call.op.name in pool_names}
    assert pool_layouts == dict.fromkeys(pool_names, "NHWC")
    rng = np.random.default_rng(1)
    inputs = [rng.uniform(-1, 1, p.type_annotation.shape).astype("float32") for p in mod["main"].params]
    assert_outputs_close(passinfra.build(mod, opt_level=3)(*inputs), passinfra.evaluate(mod, *inputs))
