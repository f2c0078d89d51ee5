"""ONNX ops defined as functions of other ops: imported by expanding them into their bodies.

Many ONNX ops (Attention, RMSNormalization, RotaryEmbedding, GroupNormalization, Mish,
Celu, Swish, the window functions, ...) come with a *function*: a body of simpler ONNX
ops that defines them, either fixed (``schema.has_function``) or built for the node's
attributes and input types (``schema.has_context_dependent_function``). Models may also
define their own functions (``model.functions``). As onnxruntime does, an op with no
converter at the opset in use but with such a function is imported by expanding the node
into the body and converting the body's nodes with the ordinary converters, recursively
(a body may itself call a function op). An op with a converter keeps its converter: the
converter of a fused op is usually both faster and closer to onnxruntime.

Expansion of one node:

* the body is the model-local function named by the node's domain and op type, else the
  schema's function for the newest function version not above the opset in use (a
  context-dependent one is built from the node and the static types of its inputs);
* the body's formal inputs and outputs are renamed to the node's actual names (an absent
  optional input becomes the empty name, so the body sees it as absent); every other
  value gets a fresh name, unique in the import, ``<op>#<n>/<name>``;
* an attribute of a body node that refers to a function attribute (``ref_attr_name``)
  takes the node's value of that attribute, or its default (the schema's, or the local
  function's ``attribute_proto``); with neither, the attribute is left out;
* the body's nodes are converted at the body's own opset imports, not the model's.

Unsupported ops. :func:`missing_ops` says, before conversion, which op types a node
needs that have no converter: nothing when it expands into supported ops (recursively);
the op itself when it has neither a converter nor a function; and for a function whose
body uses unsupported ops, each such inner op named with the op it was found in,
``"Foo (in Attention)"`` (the outermost op of the model's graph), so the one-line
UnsupportedOpsError says both what is missing and why it is needed. Context-dependent
bodies need their input types before anything is converted: they come from ONNX shape
inference over a type-only copy of the graph (initializers replaced by their declared
types; small ones kept so that shape computations still fold).
"""

from __future__ import annotations

import collections
import copy
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from passinfra.errors import RaypassError
from passinfra.frontend.onnx_ops import lookup
from passinfra.frontend.onnx_ops.context import OnnxImportError, RuntimeValueError
from passinfra.frontend.onnx_ops.registry import domain_name, op_key
from passinfra.frontend.onnx_subgraph import rename_free_names
from passinfra.ir.types import TensorType, TupleType

__all__ = ["FunctionBody", "ModelFunctions", "missing_label"]

# initializers this small keep their data in the type-only copy used for shape inference:
# shape arguments (Reshape's shape, Slice's starts, ...) are tiny, weights are not
_SMALL_INITIALIZER = 64
# a local function that calls itself, directly or not, would expand forever
_MAX_DEPTH = 64


def missing_label(inner: str, outer: str) -> str:
    """How an unsupported op inside ``outer``'s function is reported."""
    return f"{inner} (in {outer})"


@dataclass(frozen=True)
class FunctionBody:
    """A node expanded: its body's nodes (renamed, attributes substituted) and the opset
    of the default domain they are converted at, with the body's full opset imports."""

    nodes: tuple[onnx.NodeProto, ...]
    opset: int
    opset_imports: Mapping[str, int]


class ModelFunctions:
    """The functions a model can expand its nodes with, and the expansion itself.

    One instance serves one import (or one :func:`missing_ops` check); it numbers the
    expansions it makes, so every fresh value name is unique in that import.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.local = {(domain_name(f.domain), f.name): f for f in model.functions}
        self.opset_imports = {domain_name(e.domain): e.version for e in model.opset_import}
        self._counter = itertools.count()
        self._graph_types: dict[str, onnx.TypeProto] | None = None
        self._taken: frozenset[str] | None = None  # computed on the first expansion

    # -- which function defines a node
    def defines(self, node: onnx.NodeProto, opset: int) -> bool:
        """Whether a function defines ``node`` at ``opset``: a model-local one, or its
        schema's (a context-dependent one counts without being built)."""
        if (domain_name(node.domain), node.op_type) in self.local:
            return True
        opset = self._domain_opset(node, opset)
        schema = _schema(node, opset)
        if schema is None:
            return False
        versions = [*schema.function_opset_versions, *schema.context_dependent_function_opset_versions]
        return _newest(versions, opset) is not None

    def _domain_opset(self, node: onnx.NodeProto, opset: int) -> int:
        """The opset a node's domain is used at: ``opset`` for the default domain; an op
        of another domain (ai.onnx.preview's FlexAttention) is versioned in its own."""
        domain = domain_name(node.domain)
        return self.opset_imports.get(domain, 1) if domain else opset

    def function_for(
        self, node: onnx.NodeProto, opset: int, input_types: Sequence[onnx.TypeProto | None]
    ) -> tuple[onnx.FunctionProto, dict[str, onnx.AttributeProto]] | None:
        """The function defining ``node`` at ``opset`` and the attribute defaults that go
        with it, or None when there is none (or a context-dependent one cannot be built
        for these input types: its builder rejects them)."""
        local = self.local.get((domain_name(node.domain), node.op_type))
        if local is not None:
            return local, {a.name: a for a in local.attribute_proto}
        opset = self._domain_opset(node, opset)
        schema = _schema(node, opset)
        if schema is None:
            return None
        defaults = {
            name: attr.default_value
            for name, attr in schema.attributes.items()
            if attr.default_value.name  # an attribute without a default has an empty proto
        }
        proto = onnx.FunctionProto()
        version = _newest(schema.function_opset_versions, opset)
        if version is not None:
            proto.ParseFromString(schema.get_function_with_opset_version(version))
            return proto, defaults
        version = _newest(schema.context_dependent_function_opset_versions, opset)
        if version is None:
            return None
        # the builders read the types of the inputs the node has, unchecked (onnx crashes
        # on a missing one): without all of them there is no body to build
        typed = list(itertools.zip_longest(node.input, input_types[: len(node.input)]))
        if not all(_is_tensor(t) for name, t in typed if name):
            return None
        types = [(t if name else onnx.TypeProto()).SerializeToString() for name, t in typed]
        try:
            built = schema.get_context_dependent_function_with_opset_version(
                version, node.SerializeToString(), types
            )
        # the builder rejects what it cannot handle (a missing input type, an unsupported
        # attribute combination): then the op has no usable function for this node
        except Exception:  # noqa: BLE001  (onnx's C++ errors arrive as several types)
            return None
        if not built:
            return None
        proto.ParseFromString(built)
        return proto, defaults

    # -- expansion
    def expand(
        self, node: onnx.NodeProto, opset: int, input_types: Sequence[onnx.TypeProto | None]
    ) -> FunctionBody | None:
        """``node``'s body, renamed and with its attributes substituted, or None when the
        node has no function at ``opset``."""
        found = self.function_for(node, opset, input_types)
        if found is None:
            return None
        function, defaults = found
        if self._taken is None:
            self._taken = _name_prefixes(self.model.graph)
        prefix = f"{node.op_type}#{next(self._counter)}/"
        while prefix in self._taken:  # the model names a value so itself: skip that number
            prefix = f"{node.op_type}#{next(self._counter)}/"
        names: dict[str, str] = {}
        for index, formal in enumerate(function.input):
            names[formal] = node.input[index] if index < len(node.input) else ""
        for index, formal in enumerate(function.output):
            if index < len(node.output) and node.output[index]:
                names[formal] = node.output[index]
        values = {**defaults, **{a.name: a for a in node.attribute}}
        nodes = tuple(_instantiate(body_node, names, prefix, values) for body_node in function.node)
        imports = {domain_name(e.domain): e.version for e in function.opset_import}
        # a local function without an import of the default domain uses the model's
        body_opset = imports.get("", self.opset_imports.get("", opset))
        return FunctionBody(nodes, body_opset, {**self.opset_imports, **imports, "": body_opset})

    # -- unsupported ops, before anything is converted
    def missing_ops(self, node: onnx.NodeProto, opset: int) -> dict[str, int]:
        """Op types ``node`` of the model's graph needs that have no converter, with
        their counts (empty when it converts, directly or through its function)."""
        counts: collections.Counter[str] = collections.Counter()
        types = self._types_of_graph()
        self._collect(node, opset, [types.get(n) for n in node.input], op_key(node), counts, 0)
        return dict(counts)

    def _collect(
        self,
        node: onnx.NodeProto,
        opset: int,
        input_types: list[onnx.TypeProto | None],
        outer: str | None,
        counts: collections.Counter[str],
        depth: int,
    ) -> None:
        key = op_key(node)
        if lookup(key, opset) is not None:
            return
        label = key if depth == 0 else missing_label(key, outer or key)
        if depth >= _MAX_DEPTH:  # a local function that calls itself
            counts[f"{label}, nested over {_MAX_DEPTH} deep"] += 1
            return
        body = self.expand(node, opset, input_types)
        if body is None:
            counts[label] += 1
            return
        known = dict(zip(node.input, input_types))
        body_types = _infer_types(body, known, self.model.functions)
        for inner in body.nodes:
            inner_types = [body_types.get(n) for n in inner.input]
            self._collect(inner, body.opset, inner_types, outer, counts, depth + 1)

    def _types_of_graph(self) -> dict[str, onnx.TypeProto]:
        """Static types of the graph's values (computed once, on first need)."""
        if self._graph_types is None:
            self._graph_types = _graph_types(self.model)
        return self._graph_types


def _schema(node: onnx.NodeProto, opset: int) -> Any:
    """The node's ONNX schema at ``opset`` of its domain, or None."""
    try:
        return onnx.defs.get_schema(node.op_type, opset, domain_name(node.domain))
    except onnx.defs.SchemaError:
        return None


def _is_tensor(ty: onnx.TypeProto | None) -> bool:
    return ty is not None and ty.HasField("tensor_type") and ty.tensor_type.elem_type != 0


def _newest(versions: Iterable[int], opset: int) -> int | None:
    """The newest function version usable at ``opset``."""
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def _instantiate(
    body_node: onnx.NodeProto,
    names: Mapping[str, str],
    prefix: str,
    values: Mapping[str, onnx.AttributeProto],
) -> onnx.NodeProto:
    """One body node, made concrete: values renamed, attribute references resolved."""
    node = onnx.NodeProto()
    node.op_type = body_node.op_type
    node.domain = body_node.domain
    node.name = prefix + (body_node.name or body_node.op_type)
    node.input.extend(_rename(n, names, prefix) for n in body_node.input)
    node.output.extend(_rename(n, names, prefix) for n in body_node.output)
    for attr in body_node.attribute:
        if attr.ref_attr_name:
            value = values.get(attr.ref_attr_name)
            if value is None:  # neither given nor defaulted: the attribute is absent
                continue
            resolved = copy.deepcopy(value)
            resolved.name = attr.name
            node.attribute.append(resolved)
        else:
            node.attribute.append(attr)
    for attr in node.attribute:  # a subgraph reads body values by their names: rename those too
        if attr.type == onnx.AttributeProto.GRAPH:
            attr.g.CopyFrom(rename_free_names(attr.g, lambda n: _rename(n, names, prefix)))
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for graph in attr.graphs:
                graph.CopyFrom(rename_free_names(graph, lambda n: _rename(n, names, prefix)))
    return node


def _name_prefixes(graph: onnx.GraphProto) -> frozenset[str]:
    """Every leading part up to a ``/`` of the graph's value names: a fresh prefix must
    not be one of them, or a body value could take the name of a graph value."""
    names = {*(v.name for v in graph.input), *(i.name for i in graph.initializer)}
    names.update(name for node in graph.node for name in node.output)
    taken = set()
    for name in names:
        end = name.find("/")
        while end >= 0:
            taken.add(name[: end + 1])
            end = name.find("/", end + 1)
    return frozenset(taken)


def _rename(name: str, names: Mapping[str, str], prefix: str) -> str:
    if not name:
        return ""
    known = names.get(name)
    return known if known is not None else prefix + name


# --------------------------------------------------------------------------- static types


def type_proto(ty: Any) -> onnx.TypeProto | None:
    """The ONNX type of an IR tensor type (None for anything else)."""
    if isinstance(ty, TupleType) or not isinstance(ty, TensorType):
        return None
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(ty.dtype))
    return onnx.helper.make_tensor_type_proto(elem, list(ty.shape))


def _graph_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Types of the graph's values by ONNX shape inference over a copy that holds no
    weights: every initializer is a typed input, except small ones that may be shapes."""
    graph = model.graph
    declared_values = (*graph.input, *graph.value_info, *graph.output)
    types = {v.name: v.type for v in declared_values if v.type.HasField("tensor_type")}
    inputs = [v for v in graph.input if v.type.HasField("tensor_type")]
    declared = {v.name for v in inputs}
    initializers = []
    for init in graph.initializer:
        small = _small_copy(init)
        if small is not None:
            initializers.append(small)
        elif init.name not in declared:
            inputs.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        types.setdefault(init.name, onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims)))
    light = onnx.helper.make_graph(list(graph.node), "types", inputs, list(graph.output), initializers)
    types.update(_infer(light, model.opset_import, model.functions, model.ir_version))
    return types


def _small_copy(init: onnx.TensorProto) -> onnx.TensorProto | None:
    """``init`` itself when it is small and holds its data in the proto, else None."""
    count = int(np.prod(init.dims)) if init.dims else 1
    if count > _SMALL_INITIALIZER or init.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        numpy_helper.to_array(init)  # the data is really there (not left in a mapped file)
    except Exception:  # noqa: BLE001  (any decoding failure just means: not usable)
        return None
    return init


def _infer_types(
    body: FunctionBody, known: Mapping[str, onnx.TypeProto | None], functions: Sequence[onnx.FunctionProto]
) -> dict[str, onnx.TypeProto]:
    """Types of a body's values, from the types of the values it reads from outside."""
    produced = {o for n in body.nodes for o in n.output}
    inputs = []
    seen = set()
    for node in body.nodes:
        for name in node.input:
            if name and name not in produced and name not in seen and known.get(name) is not None:
                seen.add(name)
                inputs.append(onnx.helper.make_value_info(name, known[name]))
    outputs = [onnx.helper.make_value_info(name, onnx.TypeProto()) for name in sorted(produced) if name]
    graph = onnx.helper.make_graph(list(body.nodes), "body", inputs, outputs)
    imports = [onnx.helper.make_opsetid(d, v) for d, v in body.opset_imports.items()]
    return {**{k: v for k, v in known.items() if v is not None}, **_infer(graph, imports, functions, None)}


def _infer(
    graph: onnx.GraphProto,
    opset_import: Iterable[onnx.OperatorSetIdProto],
    functions: Sequence[onnx.FunctionProto],
    ir_version: int | None,
) -> dict[str, onnx.TypeProto]:
    """Value types ONNX shape inference finds in ``graph``; nothing on failure (the
    caller then has fewer types, and a context-dependent body may not build)."""
    model = onnx.helper.make_model(graph, opset_imports=list(opset_import), functions=list(functions))
    if ir_version:
        model.ir_version = ir_version
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001  (inference is best effort here)
        return {}
    g = inferred.graph
    return {
        v.name: v.type
        for v in (*g.input, *g.value_info, *g.output)
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type
    }


# --------------------------------------------------------------------------- import


class UnknownOnnxFunction(OnnxImportError):
    """A node with neither a converter nor a function (the pre-check lists these first,
    so this is only reached when a context-dependent body failed to build)."""


def convert_function_node(importer: Any, node: onnx.NodeProto) -> None:
    """Convert ``node`` (no converter at the importer's opset) by expanding it into its
    function's body and converting the body's nodes with ``importer``, at the body's own
    opset. ``importer`` is the ONNX importer (``passinfra.frontend.onnx._Importer``): its
    values, types and checks are shared, so the body's results land where the node's
    outputs are read."""
    functions: ModelFunctions = importer.functions
    where = f"{node.op_type} node {node.name!r} (opset {importer.opset})"
    if (domain_name(node.domain), node.op_type) not in functions.local:
        importer._validate(node)  # a schema function's node is checked like any other
    input_types = [_value_type(importer, name) for name in node.input]
    body = functions.expand(node, importer.opset, input_types)
    if body is None:
        raise UnknownOnnxFunction(f"{where}: no converter, and no ONNX function for these input types")
    inner = copy.copy(importer)  # shares values, tracker and functions; own opset and checker
    inner.opset = body.opset
    inner.checker = _checker(importer.checker, body.opset_imports)
    for body_node in body.nodes:
        try:
            inner._convert(body_node)
        except OnnxImportError as err:
            message = f"{where}, expanded into its ONNX function: {err}"
            if isinstance(err, RuntimeValueError):  # still a value the run gives (a function body's name)
                raise RuntimeValueError(message, err.value_name) from err
            raise OnnxImportError(message) from err


def _value_type(importer: Any, name: str) -> onnx.TypeProto | None:
    """The static type of the importer's value ``name`` (None: absent or not a tensor of
    an IR dtype; a context-dependent function then has no body for it)."""
    if not name or name not in importer.values:
        return None
    value = importer.values[name]
    try:
        if isinstance(value, np.ndarray):
            return type_proto(TensorType(value.shape, value.dtype.name))
        return type_proto(importer.tracker.type_of(value))
    except RaypassError:
        return None


def _checker(outer: Any, opset_imports: Mapping[str, int]) -> Any:
    context = onnx.checker.C.CheckerContext()
    context.ir_version = outer.ir_version
    context.opset_imports = dict(opset_imports)
    return context
