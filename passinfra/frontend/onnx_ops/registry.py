"""The converter table: ONNX op type -> converters by the opset version they start at.

An op outside the default domain is keyed by its domain and type,
``com.microsoft.QLinearAdd`` (:func:`op_key`)."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

# converter(node: NodeContext) -> value or list of values (one per ONNX output)
Converter = Callable[[Any], Any]

_TABLE: dict[str, list[tuple[int, Converter]]] = {}

# the names of ONNX's default domain
DEFAULT_DOMAINS = ("", "ai.onnx")


def domain_name(domain: str) -> str:
    """A domain as the tables key it: the default domain is ``""``."""
    return "" if domain in DEFAULT_DOMAINS else domain


def op_key(node: Any) -> str:
    """A node's key in the converter table: its op type, qualified by its domain outside
    the default one (``com.microsoft.QLinearAdd``)."""
    domain = domain_name(node.domain)
    return f"{domain}.{node.op_type}" if domain else node.op_type


def converter(*op_types: str, since: int = 1) -> Callable[[Converter], Converter]:
    """Register the decorated function for ``op_types`` from opset ``since`` on."""

    def register(func: Converter) -> Converter:
        for op_type in op_types:
            versions = _TABLE.setdefault(op_type, [])
            if any(v == since for v, _ in versions):
                raise ValueError(f"ONNX converter for {op_type} since opset {since} registered twice")
            bisect.insort(versions, (since, func), key=lambda item: item[0])
        return func

    return register


def lookup(op_type: str, opset: int) -> Converter | None:
    """The converter for ``op_type`` at ``opset``, or None when there is none."""
    versions = _TABLE.get(op_type)
    if not versions:
        return None
    chosen = None
    for since, func in versions:
        if since <= opset:
            chosen = func
    # an op used at an opset older than our first converter is still the same op
    return chosen if chosen is not None else versions[0][1]


def supported_op_types() -> list[str]:
    """Every ONNX op type with at least one converter, sorted."""
    return sorted(_TABLE)
