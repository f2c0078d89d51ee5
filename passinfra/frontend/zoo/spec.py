"""The command-line form of a zoo model: ``zoo:<model>?<param>=<int>&...``.

A spec names one of the ONNX builders (``onnx_models.MODELS``); its parameters are the
builder's keyword arguments, all integers, checked by the builder's own table so an error
names the parameter, and the spec is added to the message.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

import onnx

from passinfra.frontend.zoo.onnx_models import MODELS
from passinfra.frontend.zoo.params import ZooSpecError

__all__ = ["zoo_spec"]


def zoo_spec(spec: str) -> onnx.ModelProto:
    """Build the model a spec names: ``zoo:<model>?<param>=<int>&...`` (``zoo:`` optional),
    e.g. ``zoo:transformer?layers=12&hidden=256`` or ``zoo:resnet?depth=20``."""
    text = spec[len("zoo:") :] if spec.startswith("zoo:") else spec
    name, _, query = text.partition("?")
    if name not in MODELS:
        raise ZooSpecError(f"unknown zoo model {name!r} in {spec!r}; known: {', '.join(MODELS)}")
    params: dict[str, int] = {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ZooSpecError(f"bad parameters in {spec!r}; write zoo:{name}?name=value&name=value") from None
    for key, value in pairs:
        if key in params:
            raise ZooSpecError(f"parameter {key!r} is given twice in {spec!r}")
        try:
            params[key] = int(value)
        except ValueError:
            raise ZooSpecError(f"parameter {key}={value!r} of {spec!r} is not an integer") from None
    try:
        return MODELS[name](**params)
    except ZooSpecError as err:  # the builder's own check names the parameter; add the spec
        raise ZooSpecError(f"bad parameters for zoo model {name!r} in {spec!r}: {err}") from None
