"""Subgraphs of ONNX control-flow nodes (If, Loop, Scan): imported with the importer's own
machinery, in a scope of their own.

A node attribute of type GRAPH reaches its converter as a :class:`Subgraph`, bound to the
importer converting the node. ``Subgraph.run(bindings)`` imports the graph once: its
formal inputs take the given values (known arrays or IR expressions), its initializers
become known arrays, and its nodes are converted by a copy of the importer whose value
table is a new scope over the enclosing one (a ``ChainMap``): a name the subgraph does not
define resolves through the enclosing scopes, outward to the main graph, and what the
subgraph defines never leaks out (ONNX lets a subgraph read, but not write, the values of
the scopes around it). Nodes inside are converted like any other, so a subgraph may hold
function ops and further control flow. Unrolling a loop calls ``run`` once per step.

Three helpers serve the importer around that:

* :func:`for_validation`: the node with its subgraphs emptied, for ``onnx.checker``: the
  checker cannot see the enclosing scopes, so it would reject a body that reads an outer
  value; the body's own nodes are checked one by one as they are converted.
* :func:`missing_in_subgraphs`: op types used inside a node's subgraphs that have neither
  a converter nor an ONNX function, labelled ``"Foo (in If)"``, for the one-line
  UnsupportedOpsError before anything is converted. (An op inside a subgraph with an ONNX
  function is taken as supported: its body's types are only known during conversion.)
* :func:`rename_free_names`: when an ONNX function is expanded, its body's values are
  renamed; a subgraph attribute of a body node reads body values by name too, so its free
  names are renamed the same way (names it defines itself stay: they are its own scope).
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from passinfra.frontend.onnx_ops import lookup
from passinfra.frontend.onnx_ops.context import OnnxImportError, RuntimeValueError, Value
from passinfra.frontend.onnx_ops.registry import op_key

__all__ = ["Subgraph", "for_validation", "has_subgraphs", "missing_in_subgraphs", "rename_free_names"]

_GRAPH_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


class Subgraph:
    """One GRAPH attribute of a node, ready to be imported in the scope of ``importer``
    (``passinfra.frontend.onnx._Importer``) as often as a converter needs."""

    def __init__(self, importer: Any, graph: onnx.GraphProto, node: onnx.NodeProto, attr: str) -> None:
        self._importer = importer
        self.graph = graph
        self._where = f"{node.op_type} node {node.name!r} (opset {importer.opset}), in its {attr}"

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.graph.input]

    @property
    def num_outputs(self) -> int:
        return len(self.graph.output)

    def declared_input_shape(self, index: int) -> tuple[int, ...] | None:
        """The static shape the subgraph declares for input ``index``, or None."""
        return _static_shape(self.graph.input[index].type)

    def declared_output(self, index: int) -> tuple[tuple[int, ...], np.dtype] | None:
        """The static shape and dtype declared for output ``index``, or None."""
        ty = self.graph.output[index].type
        shape = _static_shape(ty)
        if shape is None or not ty.tensor_type.elem_type:
            return None
        return shape, onnx.helper.tensor_dtype_to_np_dtype(ty.tensor_type.elem_type)

    def run(self, bindings: Sequence[Value]) -> list[Value]:
        """Import the subgraph once, its inputs bound to ``bindings``; its outputs' values."""
        if len(bindings) != len(self.graph.input):
            raise OnnxImportError(
                f"{self._where}: the subgraph takes {len(self.graph.input)} input(s), "
                f"the node binds {len(bindings)}"
            )
        inner = copy.copy(self._importer)  # shares types and functions; a scope of its own
        scope: collections.ChainMap[str, Any] = collections.ChainMap({}, self._importer.values)
        inner.values = scope
        for init in self.graph.initializer:
            scope[init.name] = numpy_helper.to_array(init)
        for value_info, value in zip(self.graph.input, bindings):
            scope[value_info.name] = value
        for node in self.graph.node:
            try:
                inner._convert(node)
            except OnnxImportError as err:
                if isinstance(err, RuntimeValueError):  # still a value the run gives (a subgraph's name)
                    raise RuntimeValueError(f"{self._where}: {err}", err.value_name) from err
                raise OnnxImportError(f"{self._where}: {err}") from err
        outputs = []
        for value_info in self.graph.output:
            if value_info.name not in scope:
                raise OnnxImportError(f"{self._where}: output {value_info.name!r} is not defined")
            outputs.append(scope[value_info.name])
        return outputs


def _static_shape(ty: onnx.TypeProto) -> tuple[int, ...] | None:
    if not ty.HasField("tensor_type") or not ty.tensor_type.HasField("shape"):
        return None
    dims = ty.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return None
    return tuple(d.dim_value for d in dims)


def has_subgraphs(node: onnx.NodeProto) -> bool:
    return any(a.type in _GRAPH_TYPES for a in node.attribute)


def attribute_value(importer: Any, node: onnx.NodeProto, attr: onnx.AttributeProto) -> Any:
    """What a converter sees of ``attr``: a :class:`Subgraph` for a graph, else its value."""
    if attr.type == onnx.AttributeProto.GRAPH:
        return Subgraph(importer, attr.g, node, attr.name)
    if attr.type == onnx.AttributeProto.GRAPHS:
        return [Subgraph(importer, g, node, attr.name) for g in attr.graphs]
    return onnx.helper.get_attribute_value(attr)


def for_validation(node: onnx.NodeProto) -> onnx.NodeProto:
    """``node`` with every subgraph emptied (names kept), for ``onnx.checker.check_node``."""
    if not has_subgraphs(node):
        return node
    stripped = copy.copy(node)
    for attr in stripped.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            attr.g.CopyFrom(onnx.GraphProto(name=attr.g.name))
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for graph in attr.graphs:
                graph.CopyFrom(onnx.GraphProto(name=graph.name))
    return stripped


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def missing_in_subgraphs(node: onnx.NodeProto, opset: int, functions: Any) -> dict[str, int]:
    """Op types in ``node``'s subgraphs (at any depth) with neither a converter nor an ONNX
    function at ``opset``, labelled with ``node``'s op, and their counts."""
    from passinfra.frontend.onnx_functions import missing_label  # (it imports this module)

    counts: collections.Counter[str] = collections.Counter()
    outer = op_key(node)
    pending = list(_subgraphs(node))
    while pending:
        graph = pending.pop()
        for inner in graph.node:
            key = op_key(inner)
            if lookup(key, opset) is None and not functions.defines(inner, opset):
                counts[missing_label(key, outer)] += 1
            pending.extend(_subgraphs(inner))
    return dict(counts)


def rename_free_names(graph: onnx.GraphProto, rename: Callable[[str], str]) -> onnx.GraphProto:
    """A copy of ``graph`` whose reads of names it does not define (itself or, for a nested
    subgraph, the graphs around it inside ``graph``) go through ``rename``."""
    renamed = copy.deepcopy(graph)
    pending: list[tuple[onnx.GraphProto, frozenset[str]]] = [(renamed, frozenset())]
    while pending:
        current, enclosing = pending.pop()
        bound = set(enclosing)
        bound.update(v.name for v in current.input)
        bound.update(i.name for i in current.initializer)
        bound.update(o for n in current.node for o in n.output)
        for node in current.node:
            for index, name in enumerate(node.input):
                if name and name not in bound:
                    node.input[index] = rename(name)
            pending.extend((g, frozenset(bound)) for g in _subgraphs(node))
        for value_info in current.output:  # an output may pass an outer value straight through
            if value_info.name not in bound:
                value_info.name = rename(value_info.name)
    return renamed
