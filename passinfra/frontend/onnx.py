"""Import ONNX models into an IRModule.

``from_onnx(model_or_path, shapes=None, dims=None)`` walks the graph in its (topological) node order
and converts each node with the converter registered for its op type and the model's
opset (``passinfra.frontend.onnx_ops``). Values known at import time (initializers,
Constants, shape computations) stay NumPy arrays and fold as the walk goes, through the
ops' own NumPy implementations, so the IR keeps static shapes; over symbolic input dims
(a ``dim_param`` not fixed by ``shapes``) they fold to dims (:mod:`.onnx_ops.shape_values`).
The result has one function, ``main``: the graph inputs (initializers excluded) as
parameters in order, returning the graph output or a tuple of the outputs.
"""

from __future__ import annotations

import ast
import collections
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from passinfra.errors import EvaluationError, IRError, RaypassError
from passinfra.file_pages import release_file_pages
from passinfra.frontend.onnx_dtypes import UnsupportedDtypesError, listing, unsupported_dtypes
from passinfra.frontend.onnx_functions import ModelFunctions, convert_function_node
from passinfra.frontend.onnx_ops import lookup
from passinfra.frontend.onnx_ops.context import (
    NodeContext,
    OnnxImportError,
    OnnxImportWarning,
    TypeTracker,
    is_symbolic_value,
)
from passinfra.frontend.onnx_ops.registry import DEFAULT_DOMAINS, op_key
from passinfra.frontend.onnx_ops.shape_values import fold_symbolic
from passinfra.frontend.onnx_ops.tensor import onnx_dtype
from passinfra.frontend.onnx_reader import read_mapped
from passinfra.frontend.onnx_subgraph import (
    attribute_value,
    for_validation,
    has_subgraphs,
    missing_in_subgraphs,
)
from passinfra.frontend.onnx_weights import initializer_array
from passinfra.ir.dims import Dim, DimVar, SymDim, bounds
from passinfra.ir.expr import Constant, Expr, Function, Tuple, Var
from passinfra.ir.module import IRModule
from passinfra.ir.types import TensorType, normalize_dtype
from passinfra.runtime import evaluate

__all__ = ["from_onnx", "UnsupportedOpsError", "UnsupportedDtypesError", "OnnxImportError",
           "OnnxImportWarning", "unsupported_ops", "unsupported_dtypes"]


# each initializer's raw_data left in the mapped model file, in graph order (None: the
# model holds them)
RawWeights = list[memoryview | None] | None


class UnsupportedOpsError(RaypassError, NotImplementedError):
    """A model uses ops the importer has no converter for; lists every one with its count
    (and, on the same line, the unsupported dtypes it declares, if any: ``dtype_counts``)."""

    def __init__(self, counts: Mapping[str, int], dtype_counts: Mapping[str, int] | None = None) -> None:
        self.counts = dict(counts)
        self.dtype_counts = dict(dtype_counts or {})
        message = f"the ONNX model uses {len(self.counts)} unsupported op type(s): {listing(self.counts)}"
        if self.dtype_counts:
            message += f"; and {len(self.dtype_counts)} unsupported dtype(s): {listing(self.dtype_counts)}"
        super().__init__(message)


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in DEFAULT_DOMAINS:
            return entry.version
    return 1


def unsupported_ops(model: onnx.ModelProto) -> dict[str, int]:
    """Op types of ``model`` with no converter at its opset, and how often each occurs;
    an op defined by an ONNX function counts only by the unsupported ops of its body
    (:mod:`.onnx_functions`)."""
    opset = _default_opset(model)
    counts: collections.Counter[str] = collections.Counter()
    functions = ModelFunctions(model)
    for node in model.graph.node:
        key = op_key(node)
        if lookup(key, opset) is None:
            counts.update(functions.missing_ops(node, opset))
        counts.update(missing_in_subgraphs(node, opset, functions))  # If/Loop/Scan bodies
    return dict(counts)


def _load(model_or_path: Any) -> tuple[onnx.ModelProto, str | None, RawWeights]:
    """The model, the directory its external data lives in (None: given in memory), and
    its initializers' raw bytes when they were left in the mapped file (see
    :mod:`.onnx_reader`; None: they are in the ModelProto)."""
    base_dir: str | None = None
    raw: RawWeights = None
    if isinstance(model_or_path, onnx.ModelProto):
        model, where = model_or_path, "the ONNX model"
    elif isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        (model, raw), where = _read_model_file(path), f"ONNX file {path!r}"
        base_dir = os.path.dirname(os.path.abspath(path))
    else:
        raise OnnxImportError(
            f"from_onnx needs an onnx.ModelProto or a path, got a {type(model_or_path).__name__}"
        )
    _check_model_structure(model, where)
    return model, base_dir, raw


def _read_model_file(path: str) -> tuple[onnx.ModelProto, RawWeights]:
    """The ModelProto in ``path`` (its raw weights left in a map of the file when the
    file allows); a file that is no ONNX model at all (empty, a directory, undecodable
    bytes) is an OnnxImportError naming the file, not a protobuf traceback."""
    if os.path.isdir(path):
        raise OnnxImportError(f"{path!r} is a directory, not an ONNX file")
    if os.path.getsize(path) == 0:  # protobuf decodes b"" as an empty model without complaint
        raise OnnxImportError(f"ONNX file {path!r} is empty")
    mapped = read_mapped(path)
    if mapped is not None:
        return mapped.model, mapped.raw
    try:
        # external data stays on disk: the importer maps it (onnx_weights)
        return onnx.load(path, load_external_data=False), None
    except DecodeError:
        raise OnnxImportError(
            f"ONNX file {path!r} is not a valid ONNX model (truncated or corrupt: protobuf cannot decode it)"
        ) from None


def _check_model_structure(model: onnx.ModelProto, where: str) -> None:
    """Protobuf decodes many byte strings into *some* ModelProto (unknown fields are
    skipped), so a decodable file still needs a graph that yields something."""
    if not model.HasField("graph"):
        raise OnnxImportError(f"{where} has no graph (is it an ONNX model?)")
    if not model.graph.output:
        raise OnnxImportError(f"{where} has a graph without outputs")
    if not all(type(name) is str for name in _names(model)):
        raise OnnxImportError(f"{where} holds names that are not valid UTF-8 text (a corrupt file?)")


def _names(model: onnx.ModelProto) -> Iterator[str | bytes]:
    """Every name the importer reads. ONNX string fields are proto2, so the decoder does
    not check their UTF-8: an invalid one arrives as ``bytes``."""
    graph = model.graph
    yield from (entry.domain for entry in model.opset_import)
    yield from (value.name for value in (*graph.input, *graph.output, *graph.initializer))
    for node in graph.node:
        yield from (node.name, node.op_type, node.domain, *node.input, *node.output)
        yield from (attr.name for attr in node.attribute)


def _input_type(
    value_info: onnx.ValueInfoProto, shapes: Mapping[str, Sequence[int]], dims: _DimNames
) -> TensorType:
    name = value_info.name
    tensor_type = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type"):
        raise OnnxImportError(f"graph input {name!r} is not a tensor (sequences and maps are not supported)")
    try:
        dtype = normalize_dtype(onnx_dtype(tensor_type.elem_type))
    except (RaypassError, ValueError) as err:
        raise OnnxImportError(f"graph input {name!r}: {err}") from None
    if name in shapes:
        return TensorType(_checked_dims(name, [int(d) for d in shapes[name]]), dtype)
    if not tensor_type.HasField("shape"):
        raise OnnxImportError(f"graph input {name!r} has no shape; pass it in shapes={{{name!r}: (...)}}")
    shape: list[Dim] = []
    for position, dim in enumerate(tensor_type.shape.dim):
        if dim.HasField("dim_value"):
            shape.append(_checked_dims(name, [dim.dim_value])[0])
        else:
            shape.append(dims.dim(dim.dim_param, name, position))
    return TensorType(shape, dtype)


# what an exporter may write in a dim_param that is an expression ("past + seq",
# "past_sequence_length + 1"): names, integers, + - * and floor division, parentheses
_DIM_EXPR_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load,
                   ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.USub, ast.UAdd)


class _DimNames:
    """The symbolic dims of a model's inputs: one DimVar per name across all inputs (so a
    ``batch`` shared by two inputs is one variable), with the bounds ``from_onnx(dims=)``
    gives (default 0.., as ONNX allows empty dims and a first decode step has past = 0)."""

    def __init__(self, bounds: Mapping[str, tuple[int, int | None]]) -> None:
        self.bounds = dict(bounds)
        self.vars: dict[str, DimVar] = {}

    def var(self, name: str) -> DimVar:
        if name not in self.vars:
            lo, hi = self.bounds.get(name, (0, None))
            try:
                self.vars[name] = DimVar(name, lo, hi)
            except RaypassError as err:
                raise OnnxImportError(f"dims[{name!r}]: {err}") from None
        return self.vars[name]

    def dim(self, param: str, input_name: str, position: int) -> Dim:
        """The dim a ``dim_param`` names (an expression over names when it is one), or a
        fresh variable for an unnamed dim."""
        param = param.strip()
        if not param:
            return self.var(_sanitize(f"{input_name}_dim{position}"))
        if param in self.bounds or _IDENTIFIER.fullmatch(param):
            return self.var(param)
        parsed = _parse_dim_expr(param, self.var)
        return parsed if parsed is not None else self.var(_sanitize(param))

    def check_used(self) -> None:
        """A ``dims`` entry no input mentions is a typo, not a bound to drop silently."""
        unused = sorted(set(self.bounds) - set(self.vars))
        if unused:
            known = ", ".join(sorted(self.vars)) or "none"
            raise OnnxImportError(f"dims names {', '.join(map(repr, unused))}, which no graph input has "
                                  f"as a symbolic dimension (the model's: {known})")


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*", re.ASCII)


def _sanitize(name: str) -> str:
    return re.sub(r"\W", "_", name, flags=re.ASCII) or "dim"


def _parse_dim_expr(text: str, var: Any) -> Dim | None:
    """``text`` as a dim expression over named variables, or None when it is not one."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: a NUL byte
        return None
    if not all(isinstance(n, _DIM_EXPR_NODES) for n in ast.walk(tree)):
        return None
    if any(isinstance(n, ast.Constant) and type(n.value) is not int for n in ast.walk(tree)):
        return None

    def value(node: ast.AST) -> Dim:
        if isinstance(node, ast.Name):
            return var(node.id)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.UnaryOp):
            return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
        assert isinstance(node, ast.BinOp)
        left, right = value(node.left), value(node.right)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        return left // right

    try:
        result = value(tree.body)
    except (RaypassError, ZeroDivisionError):  # "n // m" by a dim: not an expression the IR has
        return None
    # an expression that may be negative for every binding is no size: keep the name instead
    hi = bounds(result)[1] if isinstance(result, SymDim) else result
    return None if hi is not None and hi < 0 else result


def _checked_dims(name: str, dims: list[int]) -> tuple[int, ...]:
    for position, dim in enumerate(dims):
        if dim < 0:
            raise OnnxImportError(
                f"graph input {name!r} has a negative dimension {dim} at position {position}"
            )
    return tuple(dims)


def _checker_context(model: onnx.ModelProto) -> Any:
    """What onnx.checker needs to validate single nodes and tensors of ``model``."""
    context = onnx.checker.C.CheckerContext()
    context.ir_version = model.ir_version
    context.opset_imports = {entry.domain: entry.version for entry in model.opset_import}
    return context


# A DequantizeLinear of an initializer read only by these ops stays a qnn.dequantize of
# the integer constant rather than folding into a float32 array: FuseQDQ
# (passinfra/transform/builtin/fuse_qdq.py) turns such a contraction into integer code on
# the integer weight; a group it does not fuse folds in FoldConstant, as at import.
_INTEGER_CONTRACTIONS = frozenset({"Conv", "MatMul", "Gemm"})
_INTEGER_BIAS_READERS = frozenset({"Add"})  # a MatMul's int32 bias


def _kept_dequantized(graph: onnx.GraphProto) -> frozenset[str]:
    """Outputs of ``graph``'s DequantizeLinear nodes of an initializer that only integer
    contractions read (an int32 one, a bias, also Add)."""
    initializers = {init.name: init.data_type for init in graph.initializer}
    readers: dict[str, set[str]] = collections.defaultdict(set)
    for node in graph.node:
        for name in node.input:
            readers[name].add(node.op_type)
    outputs = {o.name for o in graph.output}
    kept = set()
    for node in graph.node:
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        dtype = initializers.get(node.input[0])
        if dtype is None or node.output[0] in outputs or not readers[node.output[0]]:
            continue
        bias = dtype == onnx.TensorProto.INT32
        allowed = _INTEGER_CONTRACTIONS | (_INTEGER_BIAS_READERS if bias else frozenset())
        eight_bits = dtype in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
        if (eight_bits or bias) and readers[node.output[0]] <= allowed:
            kept.add(node.output[0])
    return frozenset(kept)


class _Importer:
    def __init__(
        self,
        model: onnx.ModelProto,
        shapes: Mapping[str, Sequence[int]],
        base_dir: str | None = None,
        raw: RawWeights = None,
        dims: Mapping[str, tuple[int, int | None]] | None = None,
    ) -> None:
        self.model = model
        self.base_dir = base_dir
        self.raw = raw
        self.graph = model.graph
        self.opset = _default_opset(model)
        self.shapes = shapes
        self.dims = _DimNames(dims or {})
        self.tracker = TypeTracker()
        self.values: dict[str, Any] = {}
        self.checker = _checker_context(model)
        self.functions = ModelFunctions(model)  # expands ops defined by ONNX functions
        self.kept_dequantized = _kept_dequantized(model.graph)

    def _initializer(self, index: int, init: onnx.TensorProto) -> np.ndarray:
        """The ``index``-th initializer's array, not copied (see :mod:`.onnx_weights`); a
        tensor whose bytes disagree with its declared type and shape is an
        OnnxImportError naming it."""
        raw = self.raw[index] if self.raw is not None else None
        return initializer_array(init, self.checker, self.base_dir, raw)

    def _validate(self, node: onnx.NodeProto) -> None:
        """Check the node against its ONNX schema (attribute names and types, input and
        output counts) before a converter reads it: converters trust the schema."""
        try:
            # subgraphs emptied: they may read outer values the checker cannot see (their
            # nodes are checked as they are converted)
            onnx.checker.check_node(for_validation(node), self.checker)
        # ValueError: the checker's own decoder rejects the node's bytes (unknown fields a
        # corrupt file carries, which the Python decoder kept)
        except (onnx.checker.ValidationError, ValueError) as err:
            message = " ".join(str(err).split("==>")[0].split())
            raise OnnxImportError(f"{node.op_type} node {node.name!r} is not valid ONNX: {message}") from None

    def run(self) -> IRModule:
        missing, missing_dtypes = unsupported_ops(self.model), unsupported_dtypes(self.model)
        if missing:
            raise UnsupportedOpsError(missing, missing_dtypes)
        if missing_dtypes:
            raise UnsupportedDtypesError(missing_dtypes)
        for index, init in enumerate(self.graph.initializer):
            self.values[init.name] = self._initializer(index, init)
        params = []
        for value_info in self.graph.input:
            if value_info.name in self.values:  # an initializer listed as an input (old exporters)
                continue
            param = Var(value_info.name, _input_type(value_info, self.shapes, self.dims))
            self.values[value_info.name] = param
            params.append(param)
        self.dims.check_used()
        for node in self.graph.node:
            self._convert(node)
        outputs = [self._output(o.name) for o in self.graph.output]
        body = outputs[0] if len(outputs) == 1 else Tuple(outputs)
        return IRModule({"main": Function(params, body)})

    def _output(self, name: str) -> Expr:
        if name not in self.values:
            raise OnnxImportError(f"graph output {name!r} is not produced by any node")
        value = self.values[name]
        return Constant.owning(value) if isinstance(value, np.ndarray) else value

    def _convert(self, node: onnx.NodeProto) -> None:
        if lookup(op_key(node), self.opset) is None:  # an op defined by a function
            return convert_function_node(self, node)
        self._validate(node)
        inputs = []
        for name in node.input:
            if not name:
                inputs.append(None)
            elif name in self.values:
                inputs.append(self.values[name])
            else:
                raise OnnxImportError(
                    f"{node.op_type} node {node.name!r} reads {name!r}, which no node or "
                    "input defines before it (is the graph topologically sorted?)"
                )
        attrs = {a.name: attribute_value(self, node, a) for a in node.attribute}  # graphs: Subgraph
        context = NodeContext(node, inputs, attrs, self.opset, self.tracker)
        try:
            result = fold_symbolic(context)  # a shape computation over symbolic dims
            if result is None:
                result = lookup(op_key(node), self.opset)(context)
        except OnnxImportError:
            raise
        except IRError as err:  # an IR constructor rejected what the node asks for
            raise context.fail(str(err)) from err
        except TypeError as err:
            # a converter that computes with sizes as ints met a symbolic one: one clear
            # error naming the input and its dim, never int(DimVar)'s TypeError
            symbolic = self._symbolic_input(context)
            if symbolic is None:
                raise
            raise context.fail(f"{symbolic}; this op does not support symbolic dimensions yet") from err
        results = result if isinstance(result, list) else [result]
        # a node with subgraphs may read outer values its inputs do not show: its converter
        # returns known arrays itself where it can
        foldable = (not has_subgraphs(node) and all(v is None or isinstance(v, np.ndarray) for v in inputs)
                    and node.output[0] not in self.kept_dequantized)
        for name, value in zip(node.output, results):
            if not name:
                continue
            if isinstance(value, Expr):
                # typed before folding: an ill-typed node is the model's mistake, named as
                # such, not a failure of the interpreter that folds it
                self._check(value, context)
                # a value of a symbolic type (a buffer sliced to the run-time seq, a range to
                # past + seq) has known inputs but no value until a call gives the sizes
                if foldable and self.tracker.type_of(value).is_static:
                    value = self._fold(value, context)
            self.values[name] = value

    def _symbolic_input(self, context: NodeContext) -> str | None:
        """Describe the first input of ``context`` whose type has a symbolic dim, if any."""
        for index, value in enumerate(context.inputs):
            if value is None or is_symbolic_value(value) or isinstance(value, np.ndarray):
                continue
            ty = self.tracker.type_of(value)
            if isinstance(ty, TensorType) and not ty.is_static:
                return (f"input {index} ({context.node.input[index]!r}) has the type {ty} "
                        f"with the symbolic dimension {ty.dim_vars[0]}")
        return None

    def _fold(self, expr: Expr, context: NodeContext) -> np.ndarray:
        """Evaluate an expression of known inputs with the ops' NumPy implementations
        (one semantics with the interpreter and FoldConstant). The inputs are the model's
        own constants, so a value the op rejects (an index out of range) is the model's
        mistake. NumPy's floating-point warnings are silenced, as FoldConstant silences them:
        the ops' results (inf - inf = NaN in a sum, 0 * inf in Gelu) are IEEE's, as in the
        compiled code; a value ONNX leaves undefined is reported by its converter
        (``cast_known``), naming the node."""
        try:
            with np.errstate(all="ignore"):
                value = np.asarray(evaluate(expr))
        except EvaluationError as err:
            raise context.fail(f"cannot be computed from its constant inputs: {err}") from err
        # an initializer mapped from the model's file (a tied embedding transposed for the
        # head) was read whole: its pages need not stay resident next to the result
        for known in context.inputs:
            if isinstance(known, np.ndarray):
                release_file_pages(known)
        return value

    def _check(self, expr: Expr, context: NodeContext) -> None:
        """Type the new expression now, so an error names the ONNX node that made it."""
        try:
            self.tracker.type_of(expr)
        except RaypassError as err:
            raise OnnxImportError(f"{context.where()}: {err}") from err


def from_onnx(
    model_or_path: Any,
    shapes: Mapping[str, Sequence[int]] | None = None,
    dims: Mapping[str, tuple[int, int | None]] | None = None,
) -> IRModule:
    """Import an ONNX model (a ``ModelProto`` or a path) as an IRModule with entry ``main``.

    ``shapes`` maps input names to static shapes: it fixes dynamic dimensions and
    overrides declared shapes. A dynamic dimension it does not fix stays symbolic: a
    ``dim_param`` is a :class:`~passinfra.ir.dims.DimVar` of that name, shared by every
    input that names it (an expression such as ``"past + seq"`` is that sum of the
    variables), an unnamed one a fresh variable named ``<input>_dim<position>``. ``dims``
    maps a dim name to its inclusive bounds ``(lo, hi)`` (``hi`` None: unbounded); the
    default is ``(0, None)``.
    A model with unsupported ops raises :class:`UnsupportedOpsError` listing all of them;
    one declaring tensors of dtypes the IR lacks (float8, int4, ...) raises
    :class:`UnsupportedDtypesError` listing those.
    """
    model, base_dir, raw = _load(model_or_path)
    return _Importer(model, dict(shapes or {}), base_dir, raw, dims).run()
