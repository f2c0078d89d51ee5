"""Recurrent ONNX ops: RNN, GRU and LSTM (opset 7, 14 and 22 forms), unrolled.

Shapes are static, so each node becomes its recurrence written out step by step in ops
that already exist and compile (dense, add, the activations, where, concatenate, ...):
one dense for the input projection of the whole sequence per direction, then per time
step one dense with the recurrent weights and the gates' elementwise work, which FuseOps
fuses into a few kernels per step. The steps' kernels are structurally equal (per-step
values reach them as arguments, never as constants baked in), so FuseOps creates each
once and the C compiler sees one copy, however long the sequence.

Why not one dedicated op: it would need a loop-level lowering with a sequential loop
carrying state around GEMMs, which neither the lowering nor the fusion pass has, and it
would hide the gates from fusion. The cost of unrolling is IR size, linear in the
sequence: per step and direction about 8 nodes for an RNN, 20 for an LSTM and 23 for a
GRU (5 or 6 more with ``sequence_lens``), and the graph passes' time with it (on two
busy cores a bidirectional LSTM over 1024 steps imports and builds in about 16 s, a
bidirectional GRU over 2048 in about 50 s). So the importer refuses more than
``MAX_UNROLLED_STEPS`` steps (sequence length times directions) with an error that says
so. The steps' outputs are joined into ``Y`` by a tree of small concatenations
(:func:`_concatenate_tree`), so no kernel takes an argument per step and each output
dies soon after it is made.

Semantics follow the ONNX spec; where it is silent they follow onnxruntime's CPU
kernels (which the tests compare with):

* ``clip`` bounds the input of every gate activation (after the biases and peepholes);
  the LSTM output activation ``h`` gets the cell state unclipped.
* ``input_forget`` couples the LSTM gates as ``f = 1 - i``.
* ``activation_alpha``/``activation_beta`` are consumed in activation order by the
  activations that take them; a missing value takes the default of the ONNX operator of
  that name, as the spec says (LeakyRelu 0.01, ThresholdedRelu 1.0, HardSigmoid 0.2/0.5,
  Elu 1.0; Affine 1.0/0.0 and ScaledTanh 1.0/1.0; onnxruntime instead uses 0.0 for the
  last three, and for every RNN activation). Names are matched case-insensitively.
* ``sequence_lens``: a batch entry of length ``L`` is processed over its first ``L``
  steps only (the reverse direction from ``L - 1`` down to 0); its outputs past ``L`` are
  zero and its final states are the states after its last step, zero when ``L`` is 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from passinfra.frontend.onnx_ops.context import NodeContext, Value
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir import op
from passinfra.ir.expr import Expr
from passinfra.ir.op import extra

# sequence length x directions above which a node is refused: the unrolled IR and its
# build time grow linearly (4096 steps of a GRU: under a minute), and past this they stop
# being a reasonable price for a model
MAX_UNROLLED_STEPS = 4096
# pieces per concatenation when the steps' outputs are stacked into Y
_FAN_IN = 16


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --------------------------------------------------------------------------- activations


@dataclass(frozen=True)
class _ActivationKind:
    uses_alpha: bool
    uses_beta: bool
    default_alpha: float
    default_beta: float
    build: Callable[[Expr, float, float, Callable[[float], Expr]], Expr]


def _affine(x, alpha, beta, const):
    return op.add(op.multiply(x, const(alpha)), const(beta))


def _thresholded_relu(x, alpha, beta, const):
    return op.where(op.greater(x, const(alpha)), x, const(0.0))


def _scaled_tanh(x, alpha, beta, const):
    return op.multiply(const(alpha), op.tanh(op.multiply(x, const(beta))))


# lower-case name -> how it is built (every activation the spec lists)
_ACTIVATIONS: dict[str, _ActivationKind] = {
    "relu": _ActivationKind(False, False, 0.0, 0.0, lambda x, a, b, c: op.nn.relu(x)),
    "tanh": _ActivationKind(False, False, 0.0, 0.0, lambda x, a, b, c: op.tanh(x)),
    "sigmoid": _ActivationKind(False, False, 0.0, 0.0, lambda x, a, b, c: op.sigmoid(x)),
    "affine": _ActivationKind(True, True, 1.0, 0.0, _affine),
    "leakyrelu": _ActivationKind(
        True, False, 0.01, 0.0, lambda x, a, b, c: extra.unary("nn.leaky_relu", x, alpha=a)
    ),
    "thresholdedrelu": _ActivationKind(True, False, 1.0, 0.0, _thresholded_relu),
    "scaledtanh": _ActivationKind(True, True, 1.0, 1.0, _scaled_tanh),
    "hardsigmoid": _ActivationKind(
        True, True, 0.2, 0.5, lambda x, a, b, c: extra.unary("nn.hard_sigmoid", x, alpha=a, beta=b)
    ),
    "elu": _ActivationKind(True, False, 1.0, 0.0, lambda x, a, b, c: extra.unary("nn.elu", x, alpha=a)),
    "softsign": _ActivationKind(False, False, 0.0, 0.0, lambda x, a, b, c: extra.unary("nn.softsign", x)),
    "softplus": _ActivationKind(False, False, 0.0, 0.0, lambda x, a, b, c: extra.unary("nn.softplus", x)),
}


@dataclass(frozen=True)
class _Activation:
    kind: _ActivationKind
    alpha: float
    beta: float


def _activations(node: NodeContext, defaults: Sequence[str], directions: int) -> list[list[_Activation]]:
    """The activations of each direction, with their alpha/beta resolved."""
    names = [_text(n) for n in node.attr("activations", [])] or list(defaults) * directions
    per_direction = len(defaults)
    if len(names) != per_direction * directions:
        raise node.fail(
            f"expects {per_direction} activation(s) per direction ({per_direction * directions} "
            f"for {directions} direction(s)), got {len(names)}: {names}"
        )
    alphas = list(node.attr("activation_alpha", []))
    betas = list(node.attr("activation_beta", []))
    resolved = []
    for name in names:
        kind = _ACTIVATIONS.get(name.lower())
        if kind is None:
            raise node.fail(f"unknown activation {name!r}; the spec lists {sorted(_ACTIVATIONS)}")
        alpha = (alphas.pop(0) if alphas else kind.default_alpha) if kind.uses_alpha else 0.0
        beta = (betas.pop(0) if betas else kind.default_beta) if kind.uses_beta else 0.0
        resolved.append(_Activation(kind, float(alpha), float(beta)))
    return [resolved[d * per_direction : (d + 1) * per_direction] for d in range(directions)]


# --------------------------------------------------------------------------- values


class _Values:
    """Slicing and arithmetic on values that are either known arrays (done with NumPy,
    so weights stay plain constants) or IR expressions."""

    def __init__(self, node: NodeContext, dtype: str) -> None:
        self.node = node
        self.dtype = dtype

    def const(self, value: float) -> Expr:
        return self.node.expr(np.asarray(value, dtype=self.dtype))

    def index(self, value: Value, axis: int, i: int) -> Value:
        """``value`` at position ``i`` of ``axis`` (that axis dropped)."""
        if isinstance(value, np.ndarray):
            return np.take(value, i, axis=axis)
        shape = self.node.shape(value)
        piece = extra.strided_slice(value, shape, [axis], [i], [i + 1], [1])
        return op.reshape(piece, shape[:axis] + shape[axis + 1 :])

    def cols(self, value: Value, start: int, stop: int) -> Value:
        """``value[..., start:stop]``."""
        return self._slice(value, -1, start, stop)

    def rows(self, value: Value, start: int, stop: int) -> Value:
        """``value[start:stop]``."""
        return self._slice(value, 0, start, stop)

    def _slice(self, value: Value, axis: int, start: int, stop: int) -> Value:
        if isinstance(value, np.ndarray):
            bounds = [slice(None)] * value.ndim
            bounds[axis] = slice(start, stop)
            return np.ascontiguousarray(value[tuple(bounds)])
        shape = self.node.shape(value)
        return extra.strided_slice(value, shape, [axis % len(shape)], [start], [stop], [1])

    def add(self, a: Value, b: Value) -> Value:
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            return a + b
        return op.add(self.node.expr(a), self.node.expr(b))

    def concatenate(self, values: Sequence[Value]) -> Value:
        """``values`` joined along their last axis."""
        if all(isinstance(v, np.ndarray) for v in values):
            return np.concatenate(values, axis=-1)
        return op.concatenate([self.node.expr(v) for v in values], axis=-1)

    def transpose(self, value: Value, axes: Sequence[int]) -> Value:
        if isinstance(value, np.ndarray):
            return np.ascontiguousarray(value.transpose(axes))
        return op.transpose(value, list(axes))


# --------------------------------------------------------------------------- the node


@dataclass(frozen=True)
class _CellKind:
    """What distinguishes RNN, GRU and LSTM for the shared unrolling."""

    gates: int
    default_activations: tuple[str, ...]
    has_cell: bool  # LSTM: the cell state C and the output Y_c


_RNN = _CellKind(1, ("Tanh",), False)
_GRU = _CellKind(3, ("Sigmoid", "Tanh"), False)
_LSTM = _CellKind(4, ("Sigmoid", "Tanh", "Tanh"), True)

_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}


@dataclass(frozen=True)
class _Direction:
    """One direction's weights and initial states, in the cell's own terms. Each is one
    expression used by every step: one weight in the library, however many steps."""

    reverse: bool
    w: Expr  # (gates * hidden, input)
    r: Expr  # (gates * hidden, hidden); GRU: the z and r gates' rows only
    r_candidate: Expr | None  # GRU: the candidate's rows of R (it reads the reset state)
    input_bias: Expr | None  # added to the input projection: Wb + Rb (GRU lbr: not Rbh)
    recurrent_bias: Expr | None  # GRU with linear_before_reset: Rbh, inside the reset product
    peepholes: tuple[Expr, Expr, Expr] | None  # LSTM: P split into its i, o, f parts
    h0: Expr  # (batch, hidden)
    c0: Expr | None  # LSTM
    activations: list[_Activation]


class _Recurrence:
    """One RNN/GRU/LSTM node: its checked attributes and inputs, and the unrolling."""

    def __init__(self, node: NodeContext, cell: _CellKind) -> None:
        self.node = node
        self.cell = cell
        x = node.input(0)
        if x is None or node.input(1) is None or node.input(2) is None:
            raise node.fail("inputs X, W and R are required")
        x_shape = node.shape(x)
        if len(x_shape) != 3:
            raise node.fail(f"X must have rank 3, got shape {tuple(x_shape)}")
        self.dtype = node.dtype(x)
        if not self.dtype.startswith(("float", "bfloat")):
            raise node.fail(f"X must be a floating-point tensor, got {self.dtype}")
        self.values = _Values(node, self.dtype)
        self.layout = int(node.attr("layout", 0))
        if self.layout not in (0, 1):
            raise node.fail(f"layout must be 0 or 1, got {self.layout}")
        if self.layout == 1:  # (batch, seq, input): work in (seq, batch, input)
            x = self.values.transpose(x, (1, 0, 2))
            x_shape = (x_shape[1], x_shape[0], x_shape[2])
        self.seq, self.batch, self.input_size = x_shape
        if self.seq == 0:
            raise node.fail("X has an empty sequence (sequence length 0)")
        self.x = node.expr(x)  # (seq, batch, input)
        direction = _text(node.attr("direction", "forward"))
        if direction not in _DIRECTIONS:
            raise node.fail(f"direction must be one of {sorted(_DIRECTIONS)}, got {direction!r}")
        self.reverse_flags = _DIRECTIONS[direction]
        self.num_directions = len(self.reverse_flags)
        self.hidden = self._hidden_size()
        clip = node.attr("clip")
        self.clip = None if clip is None else float(clip)
        if self.clip is not None and not self.clip > 0:
            raise node.fail(f"clip must be positive, got {self.clip}")
        self.input_forget = bool(node.attr("input_forget", 0)) if cell.has_cell else False
        self.linear_before_reset = bool(node.attr("linear_before_reset", 0)) if cell is _GRU else False
        steps = self.seq * self.num_directions
        if steps > MAX_UNROLLED_STEPS:
            raise node.fail(
                f"a sequence of {self.seq} steps in {self.num_directions} direction(s) unrolls into "
                f"{steps} steps, above the limit of {MAX_UNROLLED_STEPS} "
                "(recurrent ops are unrolled over their static sequence length)"
            )
        self.seq_lens = self._sequence_lens()
        self._step_indices: dict[int, Expr] = {}  # shared by the directions
        activations = _activations(node, cell.default_activations, self.num_directions)
        self.directions = [self._direction(d, activations[d]) for d in range(self.num_directions)]

    # -- checking and slicing the inputs

    def _expect_shape(self, index: int, what: str, shape: tuple[int, ...]) -> Value | None:
        value = self.node.input(index)
        if value is None:
            return None
        got = tuple(self.node.shape(value))
        if got != shape:
            raise self.node.fail(f"input {what} must have shape {shape}, got {got}")
        if self.node.dtype(value) != self.dtype:
            raise self.node.fail(f"input {what} has dtype {self.node.dtype(value)}, X has {self.dtype}")
        return value

    def _hidden_size(self) -> int:
        r_shape = tuple(self.node.shape(self.node.input(2)))
        hidden = self.node.attr("hidden_size")
        if hidden is None:
            if len(r_shape) != 3:
                raise self.node.fail(f"input R must have rank 3, got shape {r_shape}")
            hidden = r_shape[2]
        hidden = int(hidden)
        if hidden <= 0:
            raise self.node.fail(f"hidden_size must be positive, got {hidden}")
        return hidden

    def _sequence_lens(self) -> Value | None:
        value = self.node.input(4)
        if value is None:
            return None
        shape = tuple(self.node.shape(value))
        if shape != (self.batch,):
            raise self.node.fail(f"input sequence_lens must have shape {(self.batch,)}, got {shape}")
        if self.node.dtype(value) not in ("int32", "int64"):
            raise self.node.fail(f"input sequence_lens must be an int32 tensor, got {self.node.dtype(value)}")
        if isinstance(value, np.ndarray):
            if np.any(value < 0) or np.any(value > self.seq):
                raise self.node.fail(
                    f"sequence_lens {value.tolist()} must lie in [0, {self.seq}] (the sequence length)"
                )
            if np.all(value == self.seq):
                return None  # every sequence is full: nothing to mask
        return value

    def _state(self, index: int, what: str, d: int) -> Value | None:
        if self.layout == 0:
            value = self._expect_shape(index, what, (self.num_directions, self.batch, self.hidden))
            return None if value is None else self.values.index(value, 0, d)
        value = self._expect_shape(index, what, (self.batch, self.num_directions, self.hidden))
        return None if value is None else self.values.index(value, 1, d)

    def _direction(self, d: int, activations: list[_Activation]) -> _Direction:
        v, g, h, expr = self.values, self.cell.gates, self.hidden, self.node.expr
        dirs = self.num_directions
        w = v.index(self._expect_shape(1, "W", (dirs, g * h, self.input_size)), 0, d)
        r = v.index(self._expect_shape(2, "R", (dirs, g * h, h)), 0, d)
        r_candidate = None
        if self.cell is _GRU:  # z and r read the previous state, the candidate its reset form
            r, r_candidate = v.rows(r, 0, 2 * h), expr(v.rows(r, 2 * h, 3 * h))
        bias = self._expect_shape(3, "B", (dirs, 2 * g * h))
        input_bias = recurrent_bias = None
        if bias is not None:
            bias = v.index(bias, 0, d)
            wb, rb = v.cols(bias, 0, g * h), v.cols(bias, g * h, 2 * g * h)
            if self.linear_before_reset:
                # Rbh goes inside r * (H Rh + Rbh): keep it out of the projection's bias
                zr_bias = v.add(v.cols(wb, 0, 2 * h), v.cols(rb, 0, 2 * h))
                input_bias = v.concatenate([zr_bias, v.cols(wb, 2 * h, 3 * h)])
                recurrent_bias = v.cols(rb, 2 * h, 3 * h)
            else:
                input_bias = v.add(wb, rb)
        peepholes = self._expect_shape(7, "P", (dirs, 3 * h)) if self.cell.has_cell else None
        if peepholes is not None:
            peepholes = v.index(peepholes, 0, d)
            peepholes = tuple(expr(v.cols(peepholes, k * h, (k + 1) * h)) for k in range(3))
        zeros = op.zeros((self.batch, h), self.dtype)  # an op, not an array of batch x hidden
        h0 = self._state(5, "initial_h", d)
        c0 = self._state(6, "initial_c", d) if self.cell.has_cell else None
        return _Direction(
            reverse=self.reverse_flags[d],
            w=expr(w),
            r=expr(r),
            r_candidate=r_candidate,
            input_bias=None if input_bias is None else expr(input_bias),
            recurrent_bias=None if recurrent_bias is None else expr(recurrent_bias),
            peepholes=peepholes,
            h0=zeros if h0 is None else expr(h0),
            c0=(zeros if c0 is None else expr(c0)) if self.cell.has_cell else None,
            activations=activations,
        )

    # -- the unrolled recurrence

    def _activate(self, activation: _Activation, x: Expr) -> Expr:
        if self.clip is not None:
            x = op.clip(x, -self.clip, self.clip)
        return activation.kind.build(x, activation.alpha, activation.beta, self.values.const)

    def _step_index(self, t: int) -> Expr:
        # a (1,) constant, not a scalar and not a slice bound: FuseOps passes it to the step's
        # kernel as an argument, so the kernels of all steps are one function
        if t not in self._step_indices:
            self._step_indices[t] = self.node.expr(np.asarray([t], dtype=np.int64))
        return self._step_indices[t]

    def _at_step(self, value: Expr, t: int) -> Expr:
        """``value[t]`` for a (seq, ...) value."""
        shape = self.node.shape(value)
        return op.reshape(op.take(value, self._step_index(t), axis=0), shape[1:])

    def _mask(self, t: int) -> Expr | None:
        """(batch, 1) bool: which batch entries are still inside their sequence at step t."""
        lens = self.seq_lens
        if lens is None:
            return None
        if isinstance(lens, np.ndarray):
            inside = (t < lens).reshape(self.batch, 1)
            return None if inside.all() else self.node.expr(inside)
        index = self.node.expr(np.asarray([t], dtype=self.node.dtype(lens)))
        return op.reshape(op.less(index, lens), (self.batch, 1))

    def _lstm_step(self, d: _Direction, gates: Expr, h: Expr, c: Expr) -> tuple[Expr, Expr]:
        v, n = self.values, self.hidden
        f_act, g_act, h_act = d.activations
        i_in, o_in, f_in, c_in = (v.cols(gates, k * n, (k + 1) * n) for k in range(4))
        if d.peepholes is not None:
            p_i, p_o, p_f = d.peepholes
            i_in = op.add(i_in, op.multiply(p_i, c))
            f_in = op.add(f_in, op.multiply(p_f, c))
        i = self._activate(f_act, i_in)
        f = op.subtract(v.const(1.0), i) if self.input_forget else self._activate(f_act, f_in)
        c_new = op.add(op.multiply(f, c), op.multiply(i, self._activate(g_act, c_in)))
        if d.peepholes is not None:
            o_in = op.add(o_in, op.multiply(p_o, c_new))
        o = self._activate(f_act, o_in)
        # the spec's clip bounds the inputs of the gate activations; as onnxruntime does,
        # the output activation h gets the cell state as it is
        h_value = h_act.kind.build(c_new, h_act.alpha, h_act.beta, v.const)
        return op.multiply(o, h_value), c_new

    def _gru_step(self, d: _Direction, x_part: Expr, h: Expr) -> Expr:
        v, n = self.values, self.hidden
        f_act, g_act = d.activations
        zr = op.add(v.cols(x_part, 0, 2 * n), op.nn.dense(h, d.r))
        z = self._activate(f_act, v.cols(zr, 0, n))
        r = self._activate(f_act, v.cols(zr, n, 2 * n))
        if self.linear_before_reset:
            linear = op.nn.dense(h, d.r_candidate)
            if d.recurrent_bias is not None:
                linear = op.add(linear, d.recurrent_bias)
            candidate_in = op.add(v.cols(x_part, 2 * n, 3 * n), op.multiply(r, linear))
        else:
            reset = op.nn.dense(op.multiply(r, h), d.r_candidate)
            candidate_in = op.add(v.cols(x_part, 2 * n, 3 * n), reset)
        candidate = self._activate(g_act, candidate_in)
        # H = (1 - z) * h~ + z * H_prev
        return op.add(op.multiply(op.subtract(v.const(1.0), z), candidate), op.multiply(z, h))

    def _run(self, d: _Direction) -> tuple[list[Expr], Expr, Expr | None]:
        """The outputs of every step, in the order the steps run (reverse: from the last
        time step), and the final states of direction ``d``."""
        seq, batch = self.seq, self.batch
        # the input projection of the whole sequence: one GEMM
        x2 = op.reshape(self.x, (seq * batch, self.input_size))
        projection = op.nn.dense(x2, d.w)
        if d.input_bias is not None:
            projection = op.add(projection, d.input_bias)
        projection = op.reshape(projection, (seq, batch, self.cell.gates * self.hidden))
        h, c = d.h0, d.c0
        zero = self.values.const(0.0)
        outputs: list[Expr] = []
        for t in reversed(range(seq)) if d.reverse else range(seq):
            x_part = self._at_step(projection, t)
            if self.cell is _GRU:
                h_new, c_new = self._gru_step(d, x_part, h), None
            else:
                gates = op.add(x_part, op.nn.dense(h, d.r))
                if self.cell is _LSTM:
                    h_new, c_new = self._lstm_step(d, gates, h, c)
                else:
                    h_new, c_new = self._activate(d.activations[0], gates), None
            mask = self._mask(t)
            if mask is None:
                outputs.append(h_new)
                h, c = h_new, c_new
            else:
                # past its length a batch entry keeps its state and outputs zeros
                outputs.append(op.where(mask, h_new, zero))
                h = op.where(mask, h_new, h)
                c = op.where(mask, c_new, c) if c is not None else None
        if self.seq_lens is not None:
            h, c = self._zero_if_empty(h), self._zero_if_empty(c)
        return outputs, h, c

    def _zero_if_empty(self, state: Expr | None) -> Expr | None:
        """A final state of a sequence of length 0 is zero (as onnxruntime gives it)."""
        if state is None:
            return None
        lens = self.seq_lens
        if isinstance(lens, np.ndarray):
            if lens.all():
                return state
            return op.where(self.node.expr((lens > 0).reshape(self.batch, 1)), state, self.values.const(0.0))
        nonempty = op.greater(lens, self.node.expr(np.zeros((), dtype=self.node.dtype(lens))))
        return op.where(op.reshape(nonempty, (self.batch, 1)), state, self.values.const(0.0))

    # -- outputs

    def convert(self) -> list[Expr | None]:
        """Y, Y_h and (LSTM) Y_c; None for an output the node leaves unnamed."""
        runs = [self._run(d) for d in self.directions]
        makers = [
            lambda: self._sequence_output([ys for ys, _, _ in runs]),
            lambda: self._final_output([h for _, h, _ in runs]),
            lambda: self._final_output([c for _, _, c in runs]),
        ]
        return [make() if name else None for make, name in zip(makers, self.node.node.output)]

    def _sequence_output(self, per_direction: list[list[Expr]]) -> Expr:
        """Y: (seq, directions, batch, hidden), or (batch, seq, directions, hidden) in layout 1."""
        b, n = self.batch, self.hidden
        stacked = []
        for d, ys in zip(self.directions, per_direction):
            y = _concatenate_tree([op.reshape(y, (1, 1, b, n)) for y in ys])
            if d.reverse:  # stacked in the order the steps ran: put it in time order
                y = extra.strided_slice(y, (self.seq, 1, b, n), [0], [self.seq - 1], [-self.seq - 1], [-1])
            stacked.append(y)
        y = stacked[0] if len(stacked) == 1 else op.concatenate(stacked, axis=1)
        return op.transpose(y, (2, 0, 1, 3)) if self.layout else y

    def _final_output(self, states: list[Expr]) -> Expr:
        """Y_h or Y_c: (directions, batch, hidden), or (batch, directions, hidden) in layout 1."""
        stacked = op.concatenate([op.reshape(s, (1, self.batch, self.hidden)) for s in states], axis=0)
        return op.transpose(stacked, (1, 0, 2)) if self.layout else stacked


def _concatenate_tree(pieces: list[Expr]) -> Expr:
    """``concatenate(pieces, axis=0)`` of (n, 1, ...) pieces, as a tree of concatenations
    of at most ``_FAN_IN`` pieces.

    One flat concatenation of a long sequence would be one kernel with an argument per
    step (slow to compile) and would keep every step's output alive until the last step
    (the memory planner's work grows with the tensors alive at once). In the tree a group
    is joined as soon as its steps have run, and equal groups share one kernel. FuseOps
    would merge the levels back into one kernel (a concatenation is injective), so each
    inner node ends in :func:`_fusion_barrier`."""
    while len(pieces) > _FAN_IN:
        groups = [pieces[i : i + _FAN_IN] for i in range(0, len(pieces), _FAN_IN)]
        pieces = [
            group[0] if len(group) == 1 else _fusion_barrier(op.concatenate(group, axis=0))
            for group in groups
        ]
    return pieces[0] if len(pieces) == 1 else op.concatenate(pieces, axis=0)


def _fusion_barrier(value: Expr) -> Expr:
    """``value`` unchanged: a max over its axis 1, of length 1, is exactly the identity.
    FuseOps never fuses a reduction with its injective producers nor with any consumer,
    so the concatenations on either side stay kernels of their own."""
    return op.max(value, axis=1, keepdims=True)


def _converter(cell: _CellKind):
    def convert(node: NodeContext) -> list[Expr | None]:
        return _Recurrence(node, cell).convert()

    return convert


# the opset 14 forms add layout, opset 22 only more types: one converter serves them all
for _op_type, _cell in (("RNN", _RNN), ("GRU", _GRU), ("LSTM", _LSTM)):
    converter(_op_type, since=7)(_converter(_cell))
