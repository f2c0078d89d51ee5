"""The reference interpreter: runs graph-level IR on NumPy values.

Ops are computed by the op registry's NumPy implementations, the same ones FoldConstant
runs (one semantics; on float16/bfloat16 arguments in float32, the results rounded to
nearest-even: :mod:`passinfra.ir.op.precision`), so ``evaluate(pass(mod)) ==
evaluate(mod)`` is how tests check a pass.

Values are NumPy arrays, Python tuples of values, and :class:`Closure` objects for
functions. Evaluation is one loop over an explicit stack of activation frames; each
frame has its own task stack and memo (node -> value, which also holds the variable
bindings). So neither a 100,000-op dataflow chain, nor a 100,000-binding Let chain, nor
deep recursion between functions touches Python's recursion limit. Shared nodes are
evaluated once per activation; untaken If branches are not evaluated at all.

Each frame binds the symbolic dimensions of its function's parameters from the arguments
(:mod:`passinfra.runtime.shape_binding`); a dimension no argument gives is the caller's
of that name (a fused ``arange(past, past + seq)`` reads no tensor). A call whose attrs hold dims (a slice to
``seq``, ``arange(past, past + seq)``) is computed with those dims replaced by the frame's
sizes, so op implementations only ever see ints; the op's ``DIM_ATTR_CHECK`` first checks
what its symbolic type assumed of them, and a dim the frame does not bind is an
EvaluationError naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import DimError, EvaluationError
from passinfra.ir.analysis import free_vars
from passinfra.ir.attrs import Attrs, map_dims
from passinfra.ir.dims import evaluate as evaluate_dim
from passinfra.ir.expr import (
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
)
from passinfra.ir.module import IRModule
from passinfra.ir.op.precision import compute_op
from passinfra.ir.op.registry import DIM_ATTR_CHECK, Op
from passinfra.ir.types import FuncType, TensorType, TupleType, Type
from passinfra.runtime.shape_binding import bind_dims, bound_type

__all__ = ["Closure", "evaluate"]


class Closure:
    """A function value: a Function, the values of its free variables, and the module
    its GlobalVars refer to. Calling it from Python runs the interpreter."""

    __slots__ = ("func", "env", "module", "name")

    def __init__(self, func: Function, env: dict[Var, Any], module: IRModule, name: str) -> None:
        self.func = func
        self.env = env
        self.module = module
        self.name = name

    def __call__(self, *args: Any) -> Any:
        return _Interpreter(self.module).call(self, args)

    def __repr__(self) -> str:
        return f"Closure({self.name}, {len(self.func.params)} params)"


# task kinds of a frame's task stack
_EVAL = 0  # evaluate a node (unless memoized)
_FINISH = 1  # a Call / Tuple / TupleGetItem whose children are evaluated
_BIND = 2  # a Let whose value is evaluated: bind the var, evaluate the body
_SELECT = 3  # an If whose condition is evaluated: evaluate the chosen branch
_ALIAS = 4  # a Let / If whose value is that of another node (body or branch)

_PY_DEFAULT_DTYPES = {"float64": "float32", "int64": "int32"}  # Relay's rule, as ir.const

# Frames live on the heap, so runaway recursion in a program would otherwise eat memory
# instead of failing; this bound turns it into an error (a frame costs ~1 KB).
MAX_CALL_DEPTH = 100_000


class _Frame:
    """One function activation: the closure run, its memo and its pending tasks."""

    __slots__ = ("closure", "memo", "tasks", "return_to", "dims")

    def __init__(self, closure: Closure, memo: dict, return_to: Call | None,
                 dims: dict[str, int] | None = None) -> None:
        self.closure = closure
        self.memo = memo
        self.tasks: list[tuple[int, Expr, Any]] = [(_EVAL, closure.func.body, None)]
        self.return_to = return_to  # the Call in the caller's frame that receives the result
        self.dims = dims or {}  # the sizes of the symbolic dimensions of its parameters


class _Interpreter:
    """Evaluation state shared by the frames of one run: the module and caches."""

    def __init__(self, module: IRModule) -> None:
        self.module = module
        self._globals: dict[GlobalVar, Closure] = {}
        self._free_vars: dict[Function, list[Var]] = {}

    # -- entry points -------------------------------------------------------------------

    def global_closure(self, gv: GlobalVar) -> Closure:
        closure = self._globals.get(gv)
        if closure is None:
            if gv not in self.module:
                known = ", ".join(g.name_hint for g in self.module.functions) or "none"
                raise EvaluationError(f"no function named @{gv.name_hint} in the module (functions: {known})")
            func = self.module[gv]
            if not isinstance(func, Function):
                raise EvaluationError(
                    f"@{gv.name_hint} is a {type(func).__name__}; the interpreter only runs Functions"
                )
            closure = self._globals[gv] = Closure(func, {}, self.module, f"@{gv.name_hint}")
        return closure

    def call(self, closure: Closure, args: Sequence[Any]) -> Any:
        """Run ``closure`` on values coming from Python (converted and checked)."""
        return self._run(self._enter(closure, args, None, from_python=True))

    # -- the loop -----------------------------------------------------------------------

    def _run(self, first: _Frame) -> Any:
        frames = [first]
        while True:
            frame = frames[-1]
            tasks = frame.tasks
            if not tasks:
                frames.pop()
                result = self._leave(frame)
                if not frames:
                    return result
                frames[-1].memo[frame.return_to] = result
                continue
            kind, node, extra = tasks.pop()
            memo = frame.memo
            if kind == _EVAL:
                if node not in memo:
                    self._eval(node, frame)
            elif kind == _FINISH:
                callee_frame = self._finish(node, frame)
                if callee_frame is not None:
                    if len(frames) >= MAX_CALL_DEPTH:
                        raise EvaluationError(
                            f"call depth exceeds {MAX_CALL_DEPTH} calling {callee_frame.closure.name} "
                            "(unbounded recursion?)"
                        )
                    frames.append(callee_frame)
            elif kind == _ALIAS:
                memo[node] = memo[extra]
            elif kind == _BIND:
                self._bind(node, frame)
            else:  # _SELECT
                branch = node.true_branch if self._condition(memo[node.cond]) else node.false_branch
                tasks.append((_ALIAS, node, branch))
                tasks.append((_EVAL, branch, None))

    def _enter(
        self, closure: Closure, args: Sequence[Any], return_to: Call | None, from_python: bool,
        caller_dims: dict[str, int] | None = None,
    ) -> _Frame:
        params = closure.func.params
        if len(args) != len(params):
            names = ", ".join(f"%{p.name_hint}" for p in params) or "no parameters"
            raise EvaluationError(
                f"{closure.name} expects {len(params)} arguments ({names}), got {len(args)}"
            )
        memo = dict(closure.env)
        whats = [f"argument %{param.name_hint} of {closure.name}" for param in params]
        types = [param.type_annotation for param in params]
        if from_python:
            args = [_from_python(arg, ty, what) for ty, arg, what in zip(types, args, whats)]
        # symbolic dimensions take their sizes from the arguments (checked for agreement
        # and bounds), and the types are checked as those sizes make them
        # a dimension no argument gives is the caller's of that name
        dims = bind_dims(list(zip(whats, types, args)), caller_dims)
        if caller_dims:
            dims = {**caller_dims, **dims}
        for param, arg, what in zip(params, args, whats):
            _check_value(arg, bound_type(param.type_annotation, dims), what)
            memo[param] = arg
        return _Frame(closure, memo, return_to, dims)

    def _leave(self, frame: _Frame) -> Any:
        func = frame.closure.func
        result = frame.memo[func.body]
        try:
            ret_type = bound_type(func.ret_type, frame.dims)
        except DimError:  # a dimension no parameter gives: only the op itself knows its size
            ret_type = None
        _check_value(result, ret_type, f"the result of {frame.closure.name}")
        return result

    # -- one node -----------------------------------------------------------------------

    def _eval(self, node: Expr, frame: _Frame) -> None:
        memo, tasks = frame.memo, frame.tasks
        node_type = type(node)
        if node_type is Constant:
            memo[node] = node.data
        elif node_type is Call:
            tasks.append((_FINISH, node, None))
            for arg in reversed(node.args):
                if arg not in memo:
                    tasks.append((_EVAL, arg, None))
            if not isinstance(node.op, (Op, GlobalVar)) and node.op not in memo:
                tasks.append((_EVAL, node.op, None))  # the callee is evaluated before the arguments
        elif node_type is Tuple:
            tasks.append((_FINISH, node, None))
            for field in reversed(node.fields):
                if field not in memo:
                    tasks.append((_EVAL, field, None))
        elif node_type is TupleGetItem:
            tasks.append((_FINISH, node, None))
            tasks.append((_EVAL, node.tuple_value, None))
        elif node_type is Let:
            tasks.append((_BIND, node, None))
            tasks.append((_EVAL, node.value, None))
        elif node_type is If:
            tasks.append((_SELECT, node, None))
            tasks.append((_EVAL, node.cond, None))
        elif isinstance(node, Var):
            raise EvaluationError(
                f"variable %{node.name_hint} is not bound in {frame.closure.name} "
                "(a free variable of the program?)"
            )
        elif isinstance(node, GlobalVar):
            memo[node] = self.global_closure(node)
        elif isinstance(node, Op):
            memo[node] = node
        elif isinstance(node, Function):
            memo[node] = self._make_closure(node, memo)
        else:
            raise EvaluationError(f"the interpreter cannot evaluate a {node_type.__name__}")

    def _finish(self, node: Expr, frame: _Frame) -> _Frame | None:
        """Compute a dataflow node from its children; a call of a function instead
        returns the callee's new frame (its result lands in the memo when it returns)."""
        memo = frame.memo
        if type(node) is Tuple:
            memo[node] = tuple(memo[field] for field in node.fields)
            return None
        if type(node) is TupleGetItem:
            memo[node] = _get_item(memo[node.tuple_value], node.index)
            return None
        callee_expr = node.op
        if isinstance(callee_expr, Op):
            callee: Any = callee_expr
        elif isinstance(callee_expr, GlobalVar):
            callee = self.global_closure(callee_expr)
        else:
            callee = memo[callee_expr]
        args = [memo[arg] for arg in node.args]
        if isinstance(callee, Op):
            attrs = node.attrs
            if attrs.has_dims:  # compute functions see ints only: this frame's sizes
                attrs = _bind_attrs(callee, args, attrs, frame.dims)
            memo[node] = _apply_op(callee, args, attrs)
            return None
        if isinstance(callee, Closure):
            return self._enter(callee, args, node, from_python=False, caller_dims=frame.dims)
        raise EvaluationError(f"cannot call {_describe_value(callee)}; only ops and functions are callable")

    def _bind(self, let: Let, frame: _Frame) -> None:
        memo = frame.memo
        value = memo[let.value]
        _check_value(value, let.var.type_annotation, f"the value bound to %{let.var.name_hint}")
        if isinstance(value, Closure) and value.func is let.value:
            value.name = f"%{let.var.name_hint}"
            if let.var in self._free_vars[value.func]:
                value.env[let.var] = value  # a recursive local function sees itself
        memo[let.var] = value
        frame.tasks.append((_ALIAS, let, let.body))
        frame.tasks.append((_EVAL, let.body, None))

    def _make_closure(self, func: Function, memo: dict) -> Closure:
        captured = self._free_vars.get(func)
        if captured is None:
            captured = self._free_vars[func] = free_vars(func)
        # a variable not bound yet can only be the Let var this function is bound to
        # (recursion); _bind adds it, and any other is reported when it is looked up
        env = {var: memo[var] for var in captured if var in memo}
        return Closure(func, env, self.module, "a local function")

    @staticmethod
    def _condition(value: Any) -> bool:
        if not isinstance(value, np.ndarray) or value.dtype != np.bool_ or value.size != 1:
            raise EvaluationError(
                f"If condition must be a bool scalar, got {_describe_value(value)}"
            )
        return bool(value.reshape(()))


def _apply_op(op: Op, args: list[Any], attrs: Attrs) -> Any:
    if op.num_inputs >= 0 and len(args) != op.num_inputs:
        raise EvaluationError(f"op {op.name} expects {op.num_inputs} arguments, got {len(args)}")
    try:
        out = compute_op(op, args, attrs)  # float16/bfloat16 computed in float32, rounded
    except Exception as err:
        raise EvaluationError(f"op {op.name} failed: {type(err).__name__}: {err}") from err
    return _op_output(op, out)


def _bind_attrs(op: Op, args: list[Any], attrs: Attrs, dims: dict[str, int]) -> Attrs:
    """``attrs`` with each symbolic dimension replaced by its size under ``dims`` (the
    frame's binding), after the op's check of what its type assumed of those sizes."""
    try:
        bound = Attrs({key: map_dims(value, lambda dim: evaluate_dim(dim, dims))
                       for key, value in attrs.items()})
    except DimError as err:
        raise EvaluationError(f"op {op.name}: an attribute holds a dimension the call's arguments do "
                              f"not give: {err}") from None
    check = op.get_attr(DIM_ATTR_CHECK)
    if check is not None:
        try:
            check(args, attrs, bound)
        except ValueError as err:
            raise EvaluationError(f"op {op.name}: {err}") from None
    return bound




def _op_output(op: Op, out: Any) -> Any:
    """The impl's result as an interpreter value (NumPy scalars become 0-d arrays)."""
    if isinstance(out, np.ndarray):
        return out
    if isinstance(out, np.generic):
        return np.asarray(out)
    if isinstance(out, (tuple, list)):
        return tuple(_op_output(op, field) for field in out)
    raise EvaluationError(
        f"op {op.name} returned a {type(out).__name__}; its NumPy implementation must return "
        "an array or a tuple of arrays"
    )


def _get_item(value: Any, index: int) -> Any:
    if not isinstance(value, tuple):
        raise EvaluationError(f"TupleGetItem .{index} of {_describe_value(value)}, which is not a tuple")
    if index >= len(value):
        raise EvaluationError(f"TupleGetItem .{index} out of range for a tuple of {len(value)} fields")
    return value[index]


# -- values coming from Python and checks against annotations ----------------------------


def _from_python(value: Any, ty: Type | None, what: str) -> Any:
    """Turn a Python argument into an interpreter value: scalars and lists take the
    annotated dtype (float32 / int32 when unannotated); tuples convert field by field."""
    if isinstance(value, (np.ndarray, np.generic, Closure)):
        return np.asarray(value) if isinstance(value, np.generic) else value
    if isinstance(value, tuple) and not isinstance(ty, TensorType):
        fields = ty.fields if isinstance(ty, TupleType) and len(ty.fields) == len(value) else None
        return tuple(
            _from_python(field, fields[i] if fields else None, f"{what}[{i}]")
            for i, field in enumerate(value)
        )
    if isinstance(value, (bool, int, float, list, tuple)):
        try:
            if isinstance(ty, TensorType):
                return np.asarray(value, dtype=ty.dtype)
            array = np.asarray(value)
            return array.astype(_PY_DEFAULT_DTYPES.get(array.dtype.name, array.dtype))
        except (TypeError, ValueError) as err:
            raise EvaluationError(f"{what}: cannot convert {value!r} to an array: {err}") from err
    raise EvaluationError(f"{what}: expected an array, a scalar or a tuple, got a {type(value).__name__}")


def _check_value(value: Any, ty: Type | None, what: str) -> None:
    """Raise EvaluationError naming ``what`` if ``value`` does not have type ``ty``."""
    if ty is None:
        return
    if isinstance(ty, TensorType):
        ok = isinstance(value, np.ndarray) and value.dtype.name == ty.dtype and value.shape == ty.shape
    elif isinstance(ty, TupleType):
        ok = isinstance(value, tuple) and len(value) == len(ty.fields)
        if ok:
            for i, (field, field_type) in enumerate(zip(value, ty.fields)):
                _check_value(field, field_type, f"{what}[{i}]")
    elif isinstance(ty, FuncType):
        ok = isinstance(value, (Closure, Op))
    else:
        ok = True
    if not ok:
        raise EvaluationError(f"{what}: expected {_describe_type(ty)}, got {_describe_value(value)}")


def _describe_type(ty: Type) -> str:
    # written here rather than through the printer so errors never depend on it
    if isinstance(ty, TensorType):
        return f"Tensor[{ty.shape}, {ty.dtype}]"
    if isinstance(ty, TupleType):
        return f"a tuple of {len(ty.fields)} ({', '.join(_describe_type(f) for f in ty.fields)})"
    if isinstance(ty, FuncType):
        return f"a function of {len(ty.arg_types)} arguments"
    return type(ty).__name__


def _describe_value(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} and dtype {value.dtype.name}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} fields"
    if isinstance(value, Closure):
        return f"the function {value.name}"
    if isinstance(value, Op):
        return f"the op {value.name}"
    return f"a {type(value).__name__}"


def evaluate(mod_or_func: IRModule | Expr | Closure, *args: Any, entry: str = "main") -> Any:
    """Run a program with the reference interpreter.

    ``mod_or_func`` is an IRModule (its function ``entry`` is run on ``args``), a
    Function (run on ``args``), a Closure, or a closed expression (no ``args``).
    Arguments are NumPy arrays, Python scalars (converted with the parameter's annotated
    dtype) or tuples for tuple-typed parameters. Returns an array, a (nested) tuple, or a
    Closure for a function value. Raises EvaluationError naming what went wrong.
    """
    if isinstance(mod_or_func, IRModule):
        interpreter = _Interpreter(mod_or_func)
        gv = entry if isinstance(entry, GlobalVar) else GlobalVar(entry)
        return interpreter.call(interpreter.global_closure(gv), args)
    if isinstance(mod_or_func, Closure):
        return mod_or_func(*args)
    if isinstance(mod_or_func, Function):
        interpreter = _Interpreter(IRModule())
        return interpreter.call(Closure(mod_or_func, {}, interpreter.module, "the function"), args)
    if isinstance(mod_or_func, Expr):
        if args:
            raise EvaluationError(
                f"an expression takes no arguments, got {len(args)}; wrap it in a Function to pass some"
            )
        interpreter = _Interpreter(IRModule())
        wrapper = Function([], mod_or_func)
        return interpreter.call(Closure(wrapper, {}, interpreter.module, "the expression"), ())
    raise EvaluationError(
        f"evaluate needs an IRModule, a Function or an expression, got a {type(mod_or_func).__name__}"
    )
