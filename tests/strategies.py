"""Random, well-typed raypass programs for property tests (hypothesis strategies).

The generator never asks the type checker what it built: it tracks every value's type
itself, from each op's shape rule (Relay / NumPy conventions, as DESIGN.md states), so a
program it produces is a test of type inference rather than a product of it. Alongside the
type it tracks a bound on the magnitude of every element, assuming the inputs that
:func:`program_inputs` draws; an op whose result could exceed ``BOUND_LIMIT`` gets its
operands squashed through ``tanh`` first, and log/sqrt/divide/power get operands moved
into their safe domain (``abs(x) + 1``), so evaluation stays finite.

Public entry points:

* ``programs(...)`` / ``typed_programs(...)``: modules with a ``main`` (the typed variant
  also returns the generator's own record of every function's return type);
* ``modules_with_many_functions(...)``: many independent functions plus a few callers;
* ``program_inputs(mod, seed)``: NumPy arguments for ``main``;
* ``GEN_SETTINGS``: hypothesis settings that suit these strategies.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from passinfra import ir
from passinfra.ir import op
from passinfra.ir.expr import Expr
from passinfra.ir.types import TensorType, TupleType, Type

PARAM_BOUND = 2.0  # program_inputs draws float inputs from [-PARAM_BOUND, PARAM_BOUND]
BOUND_LIMIT = 1e4  # no generated value may exceed this magnitude
MAX_ELEMS = 256  # keeps every tensor small, so evaluation is fast
FLOAT_DTYPES = ("float32", "float64")

GEN_SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# the comparison ops are not in the contract; use whichever the registry has
_COMPARISONS = ("greater", "less", "greater_equal", "less_equal")


# ---------------------------------------------------------------------------------------
# values and results


@dataclass(frozen=True, eq=False)
class Value:
    """An expression with the type the generator knows it has and a magnitude bound."""

    expr: Expr
    type: Type
    bound: float

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.type, TensorType)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape  # type: ignore[attr-defined]

    @property
    def dtype(self) -> str:
        return self.type.dtype  # type: ignore[attr-defined]

    @property
    def is_float(self) -> bool:
        return self.is_tensor and self.dtype in FLOAT_DTYPES


@dataclass(frozen=True)
class GeneratedProgram:
    """A generated module and the return type the generator tracked for each function."""

    mod: ir.IRModule
    ret_types: dict[str, Type]


@dataclass(frozen=True)
class GenConfig:
    """Which constructs a builder may use."""

    allow_stateful: bool = False
    allow_control_flow: bool = True
    allow_closures: bool = True


@dataclass(frozen=True)
class _Signature:
    """What a caller needs to know about a global function it may call."""

    gv: ir.GlobalVar
    param_types: tuple[TensorType, ...]
    ret_type: Type
    ret_bound: float  # for arguments within PARAM_BOUND


# ---------------------------------------------------------------------------------------
# shape helpers


def _size(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _broadcast(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        return None


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _lookup_builder(path: str) -> Callable[..., Any]:
    """The builder for op ``path`` ("add", "nn.conv2d"), looked up when used so this
    module imports even while op modules are incomplete."""
    target: Any = op
    for part in path.split("."):
        target = getattr(target, part)
    return target


def _call(path: str, *args: Any, **kwargs: Any) -> Any:
    return _lookup_builder(path)(*args, **kwargs)


def _comparisons() -> list[str]:
    return [name for name in _COMPARISONS if hasattr(op, name)]


def _tuple_expr(result: Any) -> Expr:
    """The tuple-valued expression behind a builder result (an Expr, or a Python tuple of
    TupleGetItems, depending on how the ops module returns multi-output ops)."""
    if isinstance(result, Expr):
        return result
    first = result[0]
    if not isinstance(first, ir.TupleGetItem):
        raise TypeError(f"cannot find the tuple expression behind {result!r}")
    return first.tuple_value


def _tuple_value(fields: Sequence[Value]) -> Value:
    bound = max(f.bound for f in fields)
    return Value(ir.Tuple([f.expr for f in fields]), TupleType([f.type for f in fields]), bound)


# ---------------------------------------------------------------------------------------
# the per-function builder


class _FunctionBuilder:
    """Grows one function body step by step from a pool of typed values."""

    def __init__(
        self,
        draw: Callable,
        rng: np.random.Generator,
        config: GenConfig,
        callees: Sequence[_Signature],
        prefix: str,
        closure_depth: int = 0,
    ) -> None:
        self.draw = draw
        self.rng = rng
        self.config = config
        self.callees = list(callees)
        self.prefix = prefix
        self.closure_depth = closure_depth
        self.pool: list[Value] = []
        self.produced: list[Value] = []  # values grown here (not params or captures)
        self.used: set[int] = set()
        self.bindings: list[tuple[ir.Var, Expr]] = []
        self.params: list[ir.Var] = []
        self._names = 0

    # -- small utilities ----------------------------------------------------------------

    def fresh_name(self, stem: str) -> str:
        self._names += 1
        return f"{self.prefix}{stem}{self._names}"

    def flip(self, one_in: int = 2) -> bool:
        return self.draw(st.integers(0, one_in - 1)) == 0

    def choose(self, options: Sequence[Any]) -> Any:
        return self.draw(st.sampled_from(list(options)))

    def add_param(self, ty: TensorType, bound: float, name: str = "x") -> Value:
        param = ir.Var(self.fresh_name(name), ty)
        self.params.append(param)
        value = Value(param, ty, bound)
        self.pool.append(value)
        return value

    def pick(self, pred: Callable[[Value], bool] = lambda v: True) -> Value | None:
        """A pool value satisfying ``pred``; shrinks towards the most recent one."""
        candidates = [v for v in self.pool if pred(v)]
        if not candidates:
            return None
        value = candidates[-1 - self.draw(st.integers(0, len(candidates) - 1))]
        self.used.add(id(value))
        return value

    def random_shape(self, max_ndim: int = 3, min_ndim: int = 0) -> tuple[int, ...]:
        ndim = self.draw(st.integers(min_ndim, max_ndim))
        return tuple(self.draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))

    def constant(
        self, shape: Sequence[int], dtype: str = "float32", low: float = -1.0, high: float = 1.0
    ) -> Value:
        data = self.rng.uniform(low, high, size=tuple(shape)).astype(dtype)
        bound = float(np.max(np.abs(data))) if data.size else 0.0
        return Value(ir.Constant(data), TensorType(shape, dtype), bound)

    def scalar(self, number: float, dtype: str) -> Expr:
        return ir.Constant(np.array(number, dtype=dtype))

    def squash(self, value: Value, limit: float) -> Value:
        """``value`` itself if within ``limit``, else ``tanh(value)`` (same type, bound 1)."""
        if value.bound <= limit:
            return value
        return Value(_call("tanh", value.expr), value.type, 1.0)

    def float_value(self, dtype: str | None = None) -> Value:
        """A float tensor from the pool (every function starts with one)."""
        found = self.pick(lambda v: v.is_float and (dtype is None or v.dtype == dtype))
        if found is None:
            found = self.pick(lambda v: v.is_float)
        if found is None:
            raise AssertionError("generator invariant: every scope holds a float tensor")
        if dtype is not None and found.dtype != dtype:
            return Value(_call("cast", found.expr, dtype), TensorType(found.shape, dtype), found.bound)
        return found

    def as_rank(self, value: Value, ndim: int, leading_one: bool = False) -> Value:
        """``value`` reshaped to rank ``ndim`` (a random factorisation of its size)."""
        if len(value.shape) == ndim:
            return value
        dims = [1] if leading_one else []
        remaining = _size(value.shape)
        while len(dims) < ndim - 1:
            d = self.choose(_divisors(remaining))
            dims.append(d)
            remaining //= d
        dims.append(remaining)
        shape = tuple(dims)
        return Value(_call("reshape", value.expr, shape), TensorType(shape, value.dtype), value.bound)

    def make_bool(self, value: Value) -> Value:
        """A bool tensor of ``value``'s shape: a comparison against 0 when the registry has
        one, else a cast."""
        names = _comparisons()
        ty = TensorType(value.shape, "bool")
        if names and not self.flip(4):
            expr = _call(self.choose(names), value.expr, self.scalar(0.0, value.dtype))
        else:
            expr = _call("cast", value.expr, "bool")
        return Value(expr, ty, 1.0)

    def scalar_of(self, value: Value) -> Value:
        """A scalar summary (mean) of a float tensor."""
        if value.shape == ():
            return value
        return Value(_call("mean", value.expr), TensorType((), value.dtype), value.bound)

    def value_of_type(self, ty: TensorType, max_bound: float) -> Value:
        """A value of exactly ``ty`` within ``max_bound``: reused from the pool when one
        fits (which shares it), else built with ``full``."""
        exact = self.pick(lambda v: v.type == ty and (v.bound <= max_bound or v.is_float))
        if exact is not None:
            return self.squash(exact, max_bound)
        source = self.squash(self.float_value(), 1.0)
        fill = self.scalar_of(source)
        if ty.dtype == "bool":
            flag = self.make_bool(fill)
            as_float = _call("cast", flag.expr, "float32")
            filled = _call("full", as_float, ty.shape, "float32")
            return Value(_call("cast", filled, "bool"), ty, 1.0)
        if fill.dtype != ty.dtype:
            fill = Value(_call("cast", fill.expr, ty.dtype), TensorType((), ty.dtype), fill.bound)
        return Value(_call("full", fill.expr, ty.shape), ty, fill.bound)

    # -- steps: each returns the new value, or None when it does not apply -----------

    def step_unary(self) -> Value | None:
        x = self.float_value()
        name = self.choose(["negative", "abs", "tanh", "sigmoid", "exp", "log", "sqrt", "nn.relu", "nn.gelu"])
        if name == "exp":
            x = self.squash(x, 5.0)
            return Value(_call("exp", x.expr), x.type, math.exp(x.bound))
        if name in ("log", "sqrt"):
            shifted = _call("add", _call("abs", x.expr), self.scalar(1.0, x.dtype))
            bound = math.log1p(x.bound) if name == "log" else math.sqrt(x.bound + 1)
            return Value(_call(name, shifted), x.type, bound)
        bound = 1.0 if name in ("tanh", "sigmoid") else x.bound
        return Value(_call(name, x.expr), x.type, bound)

    def partner(self, a: Value) -> Value:
        """A second operand broadcast-compatible with ``a``: from the pool, or a constant."""
        def fits(v: Value) -> bool:
            out = _broadcast(a.shape, v.shape) if v.is_tensor and v.dtype == a.dtype else None
            return out is not None and _size(out) <= MAX_ELEMS

        if self.flip(2):
            found = self.pick(fits)
            if found is not None:
                return found
        keep_from = self.draw(st.integers(0, len(a.shape)))
        shape = tuple(1 if self.flip(3) else d for d in a.shape[keep_from:])
        return self.constant(shape, a.dtype)

    def step_binary(self) -> Value | None:
        a = self.float_value()
        b = self.partner(a)
        if self.flip(2):
            a, b = b, a
        shape = _broadcast(a.shape, b.shape)
        ty = TensorType(shape, a.dtype)
        name = self.choose(["add", "subtract", "multiply", "maximum", "minimum", "divide", "power"])
        if name in ("add", "subtract", "maximum", "minimum"):
            if a.bound + b.bound > BOUND_LIMIT:
                a, b = self.squash(a, 1.0), self.squash(b, 1.0)
            bound = max(a.bound, b.bound) if name in ("maximum", "minimum") else a.bound + b.bound
            return Value(_call(name, a.expr, b.expr), ty, bound)
        if name == "multiply":
            if a.bound * b.bound > BOUND_LIMIT:
                a, b = self.squash(a, 1.0), self.squash(b, 1.0)
            return Value(_call(name, a.expr, b.expr), ty, a.bound * b.bound)
        one = self.scalar(1.0, a.dtype)
        if name == "divide":  # the divisor is at least 1
            divisor = _call("add", _call("abs", b.expr), one)
            return Value(_call(name, a.expr, divisor), ty, a.bound)
        # power: a base >= 1 and an exponent in (-1, 1) keep the result within base
        base = _call("add", _call("abs", a.expr), one)
        exponent = _call("tanh", b.expr)
        return Value(_call(name, base, exponent), ty, a.bound + 1)

    def draw_axes(self, ndim: int) -> tuple[Any, list[int]]:
        """An ``axis`` argument (None, an int or a tuple, sometimes negative) and the
        normalised list of axes it means."""
        if ndim == 0 or self.flip(4):
            return None, list(range(ndim))
        axes = sorted(self.draw(st.sets(st.integers(0, ndim - 1), min_size=1, max_size=ndim)))
        spelled = [a - ndim if self.flip(4) else a for a in axes]
        if len(spelled) == 1 and self.flip(2):
            return spelled[0], axes
        return tuple(spelled), axes

    def step_reduce(self) -> Value | None:
        x = self.float_value()
        name = self.choose(["sum", "mean", "max"])
        axis, axes = self.draw_axes(len(x.shape))
        keepdims = self.flip(2)
        shape = tuple(
            (1 if keepdims else None) if i in axes else d for i, d in enumerate(x.shape)
        )
        shape = tuple(d for d in shape if d is not None)
        if name == "sum":
            count = _size([x.shape[i] for i in axes])
            if x.bound * count > BOUND_LIMIT:
                x = self.squash(x, 1.0)
            bound = x.bound * count
        else:
            bound = x.bound
        return Value(_call(name, x.expr, axis=axis, keepdims=keepdims), TensorType(shape, x.dtype), bound)

    def step_reshape(self) -> Value | None:
        x = self.pick(lambda v: v.is_tensor)
        return self.as_rank(x, self.draw(st.integers(1, 3)))

    def step_transpose(self) -> Value | None:
        x = self.pick(lambda v: v.is_tensor and len(v.shape) >= 2)
        if x is None:
            return None
        ndim = len(x.shape)
        axes = None if self.flip(3) else tuple(self.draw(st.permutations(range(ndim))))
        order = axes if axes is not None else tuple(reversed(range(ndim)))
        shape = tuple(x.shape[i] for i in order)
        return Value(_call("transpose", x.expr, axes=axes), TensorType(shape, x.dtype), x.bound)

    def step_concatenate(self) -> Value | None:
        x = self.pick(lambda v: v.is_tensor and len(v.shape) >= 1)
        if x is None:
            return None
        axis = self.draw(st.integers(0, len(x.shape) - 1))

        def joinable(v: Value) -> bool:
            return (
                v.is_tensor and v.dtype == x.dtype and len(v.shape) == len(x.shape)
                and all(d == e for i, (d, e) in enumerate(zip(v.shape, x.shape)) if i != axis)
            )

        fields = [x] + [self.pick(joinable) for _ in range(self.draw(st.integers(1, 2)))]
        shape = list(x.shape)
        shape[axis] = sum(f.shape[axis] for f in fields)
        if _size(shape) > MAX_ELEMS:
            return None
        spelled_axis = axis - len(shape) if self.flip(4) else axis
        expr = _call("concatenate", [f.expr for f in fields], axis=spelled_axis)
        return Value(expr, TensorType(shape, x.dtype), max(f.bound for f in fields))

    def step_split(self) -> Value | None:
        x = self.pick(lambda v: v.is_tensor and any(d >= 2 for d in v.shape))
        if x is None:
            return None
        axis = self.choose([i for i, d in enumerate(x.shape) if d >= 2])
        dim = x.shape[axis]
        if self.flip(2):
            sections = self.choose(_divisors(dim)[1:])
            arg: Any = sections
            bounds = [i * dim // sections for i in range(sections + 1)]
        else:
            cuts = sorted(self.draw(st.sets(st.integers(1, dim - 1), min_size=1, max_size=2)))
            arg = tuple(cuts)
            bounds = [0, *cuts, dim]
        pieces = []
        for lo, hi in zip(bounds, bounds[1:]):
            shape = list(x.shape)
            shape[axis] = hi - lo
            pieces.append(TensorType(shape, x.dtype))
        tuple_expr = _tuple_expr(_call("split", x.expr, arg, axis=axis))
        whole = Value(tuple_expr, TupleType(pieces), x.bound)
        self.pool.append(whole)  # later steps may take other pieces of the same split
        index = self.draw(st.integers(0, len(pieces) - 1))
        self.used.add(id(whole))
        return Value(ir.TupleGetItem(tuple_expr, index), pieces[index], x.bound)

    def step_squeeze(self) -> Value | None:
        x = self.pick(lambda v: v.is_tensor and 1 in v.shape)
        if x is None:
            x = self.step_expand_dims()
            if x is None:
                return None
        unit_axes = [i for i, d in enumerate(x.shape) if d == 1]
        if self.flip(3):
            axis, dropped = None, unit_axes
        else:
            dropped = sorted(self.draw(st.sets(st.sampled_from(unit_axes), min_size=1)))
            axis = tuple(dropped)
        shape = tuple(d for i, d in enumerate(x.shape) if i not in dropped)
        return Value(_call("squeeze", x.expr, axis=axis), TensorType(shape, x.dtype), x.bound)

    def step_expand_dims(self) -> Value | None:
        x = self.pick(lambda v: v.is_tensor and len(v.shape) <= 3)
        if x is None:
            return None
        ndim = len(x.shape)
        axis = self.draw(st.integers(0, ndim))
        shape = (*x.shape[:axis], 1, *x.shape[axis:])
        spelled = axis - ndim - 1 if self.flip(4) else axis
        return Value(_call("expand_dims", x.expr, spelled), TensorType(shape, x.dtype), x.bound)

    def step_take(self) -> Value | None:
        x = self.pick(lambda v: v.is_tensor and len(v.shape) >= 1)
        if x is None:
            return None
        axis = None if self.flip(3) else self.draw(st.integers(0, len(x.shape) - 1))
        limit = _size(x.shape) if axis is None else x.shape[axis]
        index_shape = self.random_shape(max_ndim=2)
        indices = self.rng.integers(0, limit, size=index_shape).astype("int32")
        if axis is None:
            shape = index_shape
        else:
            shape = (*x.shape[:axis], *index_shape, *x.shape[axis + 1:])
        if _size(shape) > MAX_ELEMS:
            return None
        expr = _call("take", x.expr, ir.Constant(indices), axis=axis)
        return Value(expr, TensorType(shape, x.dtype), x.bound)

    def step_where(self) -> Value | None:
        a = self.pick(lambda v: v.is_tensor and v.dtype != "bool")
        b = self.partner(a)
        if self.flip(2):
            a, b = b, a
        flag = self.pick(
            lambda v: v.is_tensor and v.dtype == "bool" and _broadcast(v.shape, a.shape, b.shape) is not None
        )
        if flag is None or self.flip(2):
            flag = self.make_bool(self.float_value())
        shape = _broadcast(flag.shape, a.shape, b.shape)
        if shape is None or _size(shape) > MAX_ELEMS:
            flag = self.make_bool(a)
            shape = _broadcast(a.shape, b.shape)
        expr = _call("where", flag.expr, a.expr, b.expr)
        return Value(expr, TensorType(shape, a.dtype), max(a.bound, b.bound))

    _CASTS = {
        "float32": ("float64", "int32", "bool"),
        "float64": ("float32",),
        "int32": ("float32", "float64"),
        "int64": ("float32",),
        "bool": ("float32", "int32"),
    }

    def step_cast(self) -> Value | None:
        x = self.pick(lambda v: v.is_tensor)
        dtype = self.choose(self._CASTS[x.dtype])
        bound = 1.0 if dtype == "bool" else x.bound
        return Value(_call("cast", x.expr, dtype), TensorType(x.shape, dtype), bound)

    def step_full(self) -> Value | None:
        fill = self.scalar_of(self.float_value())
        shape = self.random_shape()
        dtype = None if self.flip(2) else fill.dtype
        return Value(_call("full", fill.expr, shape, dtype), TensorType(shape, fill.dtype), fill.bound)

    def step_zeros_ones(self) -> Value | None:
        name = self.choose(["zeros", "ones"])
        shape = self.random_shape()
        dtype = self.choose(FLOAT_DTYPES)
        return Value(_call(name, shape, dtype), TensorType(shape, dtype), 0.0 if name == "zeros" else 1.0)

    def step_const(self) -> Value | None:
        # some constants are large enough (> 8 elements) to go to the printer's meta section
        shape = self.random_shape(max_ndim=3)
        return self.constant(shape, self.choose(FLOAT_DTYPES))

    def step_matmul(self) -> Value | None:
        a = self.as_rank(self.float_value("float32"), self.choose([2, 3]))
        k = a.shape[-1]
        batch = a.shape[:-2] if self.flip(2) else ()
        m = self.draw(st.integers(1, 4))
        b = self.constant((*batch, k, m))
        if a.bound * b.bound * k > BOUND_LIMIT:
            a = self.squash(a, 1.0)
        shape = (*a.shape[:-1], m)
        return Value(_call("matmul", a.expr, b.expr), TensorType(shape, "float32"), a.bound * b.bound * k)

    def step_dense(self) -> Value | None:
        x = self.as_rank(self.float_value("float32"), 2)
        k = x.shape[1]
        units = self.draw(st.integers(1, 4))
        w = self.constant((units, k))
        if x.bound * w.bound * k > BOUND_LIMIT:
            x = self.squash(x, 1.0)
        shape = (x.shape[0], units)
        return Value(_call("nn.dense", x.expr, w.expr), TensorType(shape, "float32"), x.bound * w.bound * k)

    def image(self) -> Value:
        """A float32 NCHW tensor: one from the pool, or another value reshaped."""
        found = self.pick(lambda v: v.is_tensor and v.dtype == "float32" and len(v.shape) == 4)
        return found if found is not None else self.as_rank(self.float_value("float32"), 4, leading_one=True)

    def step_conv2d(self) -> Value | None:
        x = self.image()
        _, c, h, w = x.shape
        groups = c if c > 1 and self.flip(3) else 1
        out_channels = groups * self.draw(st.integers(1, 2)) if groups > 1 else self.draw(st.integers(1, 4))
        if self.flip(2):
            pads = tuple(self.draw(st.lists(st.integers(0, 1), min_size=2, max_size=2)))
            pad_h, pad_w = 2 * pads[0], 2 * pads[1]
        else:  # (top, left, bottom, right)
            pads = tuple(self.draw(st.lists(st.integers(0, 1), min_size=4, max_size=4)))
            pad_h, pad_w = pads[0] + pads[2], pads[1] + pads[3]
        dilation = 2 if self.flip(4) else 1
        kh = self.draw(st.integers(1, max(1, min(3, (h + pad_h - 1) // dilation + 1))))
        kw = self.draw(st.integers(1, max(1, min(3, (w + pad_w - 1) // dilation + 1))))
        if dilation * (kh - 1) >= h + pad_h or dilation * (kw - 1) >= w + pad_w:
            dilation = 1
        stride = self.draw(st.integers(1, 2))
        out_h = (h + pad_h - dilation * (kh - 1) - 1) // stride + 1
        out_w = (w + pad_w - dilation * (kw - 1) - 1) // stride + 1
        shape = (x.shape[0], out_channels, out_h, out_w)
        if _size(shape) > MAX_ELEMS:
            return None
        weight = self.constant((out_channels, c // groups, kh, kw))
        fan_in = (c // groups) * kh * kw
        if x.bound * weight.bound * fan_in > BOUND_LIMIT:
            x = self.squash(x, 1.0)
        expr = _call(
            "nn.conv2d", x.expr, weight.expr, strides=(stride, stride), padding=pads,
            dilation=(dilation, dilation), groups=groups,
        )
        return Value(expr, TensorType(shape, "float32"), x.bound * weight.bound * fan_in)

    def step_bias_add(self) -> Value | None:
        x = self.pick(lambda v: v.is_tensor and v.dtype == "float32" and len(v.shape) >= 2)
        if x is None:
            return None
        if self.flip(2):
            axis, spelled = 1, None
        else:
            axis = self.draw(st.integers(0, len(x.shape) - 1))
            spelled = axis - len(x.shape) if self.flip(3) else axis
        bias = self.constant((x.shape[axis],))
        x = self.squash(x, BOUND_LIMIT - 1)
        expr = _call("nn.bias_add", x.expr, bias.expr) if spelled is None else _call(
            "nn.bias_add", x.expr, bias.expr, axis=spelled
        )
        return Value(expr, x.type, x.bound + bias.bound)

    def step_norm(self) -> Value | None:
        x = self.pick(lambda v: v.is_tensor and v.dtype == "float32" and len(v.shape) >= 2)
        if x is None:
            return None
        axis = 1 if self.flip(2) else len(x.shape) - 1
        channels = x.shape[axis]
        gamma, beta = self.constant((channels,)), self.constant((channels,))
        group = _size(x.shape) // channels
        if self.flip(2):
            mean = self.constant((channels,))
            var = self.constant((channels,), low=0.5, high=1.5)
            result = _call("nn.batch_norm", x.expr, gamma.expr, beta.expr, mean.expr, var.expr, axis=axis)
            normalized = ir.TupleGetItem(_tuple_expr(result), 0)
            # inference form divides by sqrt(var >= 0.5); a training form stays within sqrt(group)
            spread = max((x.bound + mean.bound) / math.sqrt(0.5), math.sqrt(group))
            return Value(normalized, x.type, spread * gamma.bound + beta.bound)
        spelled = -1 if axis == len(x.shape) - 1 and self.flip(2) else axis
        expr = _call("nn.layer_norm", x.expr, gamma.expr, beta.expr, axis=spelled)
        return Value(expr, x.type, math.sqrt(channels) * gamma.bound + beta.bound)

    def step_softmax(self) -> Value | None:
        x = self.pick(lambda v: v.is_float and len(v.shape) >= 1)
        if x is None:
            return None
        if self.flip(2):
            return Value(_call("nn.softmax", x.expr), x.type, 1.0)
        axis = self.draw(st.integers(-len(x.shape), len(x.shape) - 1))
        return Value(_call("nn.softmax", x.expr, axis=axis), x.type, 1.0)

    def step_pool(self) -> Value | None:
        x = self.image()
        n, c, h, w = x.shape
        name = self.choose(["nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d"])
        if name == "nn.global_avg_pool2d":
            return Value(_call(name, x.expr), TensorType((n, c, 1, 1), "float32"), x.bound)
        kh, kw = self.draw(st.integers(1, min(3, h))), self.draw(st.integers(1, min(3, w)))
        # padding below half the window keeps every window partly inside the input
        ph, pw = self.draw(st.integers(0, (kh - 1) // 2)), self.draw(st.integers(0, (kw - 1) // 2))
        stride = self.draw(st.integers(1, 2))
        shape = (n, c, (h + 2 * ph - kh) // stride + 1, (w + 2 * pw - kw) // stride + 1)
        expr = _call(name, x.expr, (kh, kw), strides=(stride, stride), padding=(ph, pw))
        return Value(expr, TensorType(shape, "float32"), x.bound)

    def step_tuple(self) -> Value | None:
        fields = [self.pick() for _ in range(self.draw(st.integers(1, 3)))]
        return _tuple_value(fields)

    def step_getitem(self) -> Value | None:
        tup = self.pick(lambda v: isinstance(v.type, TupleType) and len(v.type.fields) > 0)
        if tup is None:
            return None
        index = self.draw(st.integers(0, len(tup.type.fields) - 1))
        return Value(ir.TupleGetItem(tup.expr, index), tup.type.fields[index], tup.bound)

    def condition(self) -> Expr:
        """A bool scalar: a bool parameter, or a comparison (or cast) of a scalar summary."""
        flag = self.pick(lambda v: v.is_tensor and v.dtype == "bool" and v.shape == ())
        if flag is not None and self.flip(2):
            return flag.expr
        return self.make_bool(self.scalar_of(self.float_value())).expr

    def branch(self, x: Value) -> Value:
        """A type-preserving computation on ``x``, sometimes with a Let of its own."""
        name = self.choose(["negative", "tanh", "abs", "nn.relu", "sigmoid"])
        bound = 1.0 if name in ("tanh", "sigmoid") else x.bound
        first = _call(name, x.expr)
        if not self.flip(3):
            return Value(first, x.type, bound)
        local = ir.Var(self.fresh_name("b"), x.type if self.flip(2) else None)
        body = _call("add", local, x.expr)
        return Value(ir.Let(local, first, body), x.type, bound + x.bound)

    def step_if(self) -> Value | None:
        if not self.config.allow_control_flow:
            return None
        cond = self.condition()
        x = self.squash(self.float_value(), BOUND_LIMIT / 2)
        then, other = self.branch(x), self.branch(x)
        return Value(ir.If(cond, then.expr, other.expr), x.type, max(then.bound, other.bound))

    def step_call(self) -> Value | None:
        if not self.callees:
            return None
        callee = self.choose(self.callees)
        args = [self.value_of_type(ty, PARAM_BOUND) for ty in callee.param_types]
        return Value(ir.Call(callee.gv, [a.expr for a in args]), callee.ret_type, callee.ret_bound)

    def step_closure(self) -> Value | None:
        if not self.config.allow_closures or self.closure_depth >= 2:
            return None
        args = [self.pick(lambda v: v.is_tensor) for _ in range(self.draw(st.integers(1, 2)))]
        inner = _FunctionBuilder(
            self.draw, self.rng, self.config, self.callees, self.fresh_name("c") + "_", self.closure_depth + 1
        )
        for arg in args:
            inner.add_param(arg.type, arg.bound, "p")
        captured = self.pick(lambda v: v.is_float)  # a free variable of the closure
        if captured is not None:
            inner.pool.append(captured)
        inner.grow(self.draw(st.integers(1, 3)))
        func, ret = inner.finish(annotate_ret=self.flip(2))
        return Value(ir.Call(func, [a.expr for a in args]), ret.type, ret.bound)

    def step_uniform(self) -> Value | None:
        if not self.config.allow_stateful:
            return None
        shape = self.random_shape()
        return Value(_call("random.uniform", -1.0, 1.0, shape), TensorType(shape, "float32"), 1.0)

    _STEPS = (
        # name, weight
        ("unary", 6), ("binary", 6), ("reduce", 3), ("reshape", 2), ("transpose", 2),
        ("concatenate", 2), ("split", 2), ("squeeze", 1), ("expand_dims", 1), ("take", 2),
        ("where", 2), ("cast", 2), ("full", 1), ("zeros_ones", 1), ("const", 1), ("matmul", 2),
        ("dense", 2), ("conv2d", 2), ("bias_add", 2), ("norm", 2), ("softmax", 1), ("pool", 2),
        ("tuple", 2), ("getitem", 2), ("if", 2), ("call", 4), ("closure", 2), ("uniform", 3),
    )
    _STEP_CHOICES = tuple(name for name, weight in _STEPS for _ in range(weight))

    # -- assembling a function ------------------------------------------------------------

    def grow(self, n_steps: int) -> None:
        """Add ``n_steps`` values to the pool, let-binding some of them."""
        for _ in range(n_steps):
            kind = self.draw(st.sampled_from(self._STEP_CHOICES))
            value = getattr(self, f"step_{kind}")()
            if value is None:
                value = self.step_unary()
            if self.flip(4):
                annotation = value.type if self.flip(2) else None
                bound_var = ir.Var(self.fresh_name("v"), annotation)
                self.bindings.append((bound_var, value.expr))
                value = Value(bound_var, value.type, value.bound)
            self.pool.append(value)
            self.produced.append(value)

    def finish(self, annotate_ret: bool) -> tuple[ir.Function, Value]:
        """The function: its body returns the values nothing consumed (up to three)."""
        unused = [v for v in self.produced if id(v) not in self.used]
        outputs = (unused or self.produced)[-3:]
        if len(outputs) == 1:
            result = outputs[0]
        else:
            result = _tuple_value(outputs)
        body = result.expr
        for bound_var, value in reversed(self.bindings):
            body = ir.Let(bound_var, value, body)
        ret_type = result.type if annotate_ret else None
        return ir.Function(self.params, body, ret_type), result


# ---------------------------------------------------------------------------------------
# modules


def _param_types(draw: Callable, allow_bool: bool) -> list[TensorType]:
    count = draw(st.integers(1, 3))
    types = []
    for i in range(count):
        if i > 0 and allow_bool and draw(st.integers(0, 4)) == 0:
            types.append(TensorType((), "bool"))
            continue
        ndim = draw(st.integers(0, 4))
        shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
        dtype = "float64" if draw(st.integers(0, 5)) == 0 else "float32"
        types.append(TensorType(shape, dtype))
    return types


def _build_module(
    draw: Callable, config: GenConfig, may_call: Sequence[bool], steps_per_function: int
) -> GeneratedProgram:
    """Functions built in order; function i may call functions before it when
    ``may_call[i]`` (so calls form a DAG). The last one is ``main``."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    signatures: list[_Signature] = []
    functions: dict[str, ir.Function] = {}
    ret_types: dict[str, Type] = {}
    for i, calls in enumerate(may_call):
        name = "main" if i == len(may_call) - 1 else f"f{i}"
        builder = _FunctionBuilder(draw, rng, config, signatures if calls else [], f"{name}_")
        param_types = _param_types(draw, allow_bool=config.allow_control_flow)
        for ty in param_types:
            builder.add_param(ty, 1.0 if ty.dtype == "bool" else PARAM_BOUND)
        builder.grow(draw(st.integers(1, max(1, steps_per_function))))
        func, ret = builder.finish(annotate_ret=draw(st.booleans()))
        if draw(st.integers(0, 5)) == 0:
            func = func.with_attr("generated_index", i)
        gv = ir.GlobalVar(name)
        functions[name] = func
        ret_types[name] = ret.type
        signatures.append(_Signature(gv, tuple(param_types), ret.type, ret.bound))
    return GeneratedProgram(ir.IRModule(functions), ret_types)


@st.composite
def typed_programs(
    draw: Callable,
    max_nodes: int = 40,
    max_functions: int = 3,
    allow_stateful: bool = False,
    allow_control_flow: bool = True,
    allow_closures: bool = True,
) -> GeneratedProgram:
    """A random well-typed module (with ``main``) and the return types the generator
    tracked. ``max_nodes`` bounds the number of generation steps over the whole module
    (each step adds one op call or construct, plus the small helpers it needs)."""
    config = GenConfig(allow_stateful, allow_control_flow, allow_closures)
    n_functions = draw(st.integers(1, max(1, max_functions)))
    return _build_module(draw, config, [True] * n_functions, max_nodes // n_functions)


def programs(
    max_nodes: int = 40,
    max_functions: int = 3,
    allow_stateful: bool = False,
    allow_control_flow: bool = True,
    allow_closures: bool = True,
) -> st.SearchStrategy[ir.IRModule]:
    """A random well-typed IRModule with a ``main`` (see :func:`typed_programs`)."""
    return typed_programs(max_nodes, max_functions, allow_stateful, allow_control_flow, allow_closures).map(
        lambda program: program.mod
    )


@st.composite
def modules_with_many_functions(
    draw: Callable,
    min_functions: int = 5,
    max_functions: int = 50,
    max_callers: int = 3,
    nodes_per_function: int = 6,
    allow_control_flow: bool = True,
    allow_closures: bool = False,
) -> ir.IRModule:
    """A module of many independent functions, then a few that call earlier ones, then
    ``main`` (which may call any of them): the shape of work the scheduler fans out."""
    config = GenConfig(False, allow_control_flow, allow_closures)
    n_independent = draw(st.integers(min_functions, max_functions))
    n_callers = draw(st.integers(0, max_callers))
    plan = [False] * n_independent + [True] * n_callers + [True]
    return _build_module(draw, config, plan, nodes_per_function).mod


def program_inputs(mod: ir.IRModule, seed: int) -> list[np.ndarray]:
    """Arguments for ``mod["main"]``: floats in [-PARAM_BOUND, PARAM_BOUND], random bools
    and small ints, matching each parameter's annotated type."""
    rng = np.random.default_rng(seed)
    inputs = []
    for param in mod["main"].params:
        ty = param.type_annotation
        if not isinstance(ty, TensorType):
            raise TypeError(f"parameter {param.name_hint} has no tensor annotation: {ty!r}")
        if ty.dtype == "bool":
            inputs.append(np.asarray(rng.random(ty.shape) < 0.5))
        elif ty.dtype in FLOAT_DTYPES:
            inputs.append(np.asarray(rng.uniform(-PARAM_BOUND, PARAM_BOUND, ty.shape).astype(ty.dtype)))
        else:
            inputs.append(np.asarray(rng.integers(-3, 4, ty.shape).astype(ty.dtype)))
    return inputs


__all__ = [
    "GEN_SETTINGS", "PARAM_BOUND", "GeneratedProgram", "Value", "typed_programs", "programs",
    "modules_with_many_functions", "program_inputs",
]
