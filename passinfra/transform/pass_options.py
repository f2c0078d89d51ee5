"""Passes with options: the options are dataclass fields of the pass.

A built-in pass that takes options (``FoldConstant(interprocedural=True)``,
``FuseOps(fuse_opt_level=1)``, ...) is a frozen dataclass subclass of its pass kind, so
the configuration is data, not a closure: ``repr`` shows it, two passes configured alike
compare (and hash) equal, pickling keeps it (passes travel to workers), and a record of
a run (a reproducer) can name the pass and its options and rebuild exactly that pass.
The class itself is registered, so ``get_pass(name)`` is the default configuration.

``info`` is a class attribute (the options do not change it); what does depend on an
option, such as ``reads_module``, is a property of the option (for the built-in passes'
``interprocedural`` option, ``builtin.purity.ReadsModuleWhenInterprocedural``).

This is infrastructure, not library: it reads any pass's dataclass fields and any
registered factory, which is how the scheduler's reproducer records and rebuilds a run.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

from passinfra.transform.errors import PassArgumentError, PassReturnTypeError
from passinfra.transform.passes import Pass
from passinfra.transform.registry import registered_factory

__all__ = ["configured_pass", "pass_options"]


def pass_options(pass_: Pass) -> dict[str, Any]:
    """The options ``pass_`` was made with (its dataclass init fields, in declaration
    order); empty for a pass without options."""
    if not dataclasses.is_dataclass(pass_) or isinstance(pass_, type):
        return {}
    return {field.name: getattr(pass_, field.name) for field in dataclasses.fields(pass_) if field.init}


def configured_pass(name: str, options: Mapping[str, Any] | None = None) -> Pass:
    """The pass registered as ``name``, made with ``options`` (keyword arguments of its
    factory); with no options, the default configuration (as ``get_pass``)."""
    factory = registered_factory(name)
    options = dict(options or {})
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # some callables have no signature: the call will tell
        signature = None
    if signature is not None:
        try:  # bind first: a TypeError raised inside the factory is not about the options
            signature.bind(**options)
        except TypeError as error:
            raise PassArgumentError(f"pass {name!r} does not take the options {options!r}: {error}") from None
    made = factory(**options)
    if not isinstance(made, Pass):
        raise PassReturnTypeError(f"the factory of pass {name!r} returned {type(made).__name__}, not a Pass")
    return made
