"""``@module_pass`` and ``@function_pass``: build passes from functions or classes.

On a function, the decorator returns a pass instance. On a class (with
``transform_module`` / ``transform_function``), it returns a pass class of the same name
whose instances wrap an instance of the decorated class; attributes the pass does not
have fall through to the wrapped instance.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from passinfra.transform.errors import PassArgumentError
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import FunctionPass, ModulePass, Pass


def module_pass(
    pass_func: Callable | type | None = None,
    opt_level: int | None = None,
    name: str | None = None,
    required: Iterable[str] | None = None,
    *,
    infers_types: bool = False,
) -> Any:
    """Make a ModulePass from ``pass_func(mod, ctx)`` or a class with ``transform_module``.

    Usable bare with arguments (``module_pass(f, opt_level=1)``) or as a decorator
    (``@module_pass(opt_level=1)``). ``opt_level`` is mandatory. ``infers_types=True``
    declares a type-inference pass (see :class:`PassInfo`).
    """
    return _make_decorator(
        ModulePass, "transform_module", "module", pass_func, opt_level, name, required, infers_types
    )


def function_pass(
    pass_func: Callable | type | None = None,
    opt_level: int | None = None,
    name: str | None = None,
    required: Iterable[str] | None = None,
    reads_module: bool = True,
) -> Any:
    """Make a FunctionPass from ``pass_func(func, mod, ctx)`` or a class with
    ``transform_function``; as :func:`module_pass` otherwise.

    ``reads_module=False`` promises that the pass looks at nothing in ``mod`` but the
    function it is given; a parallel scheduler can then run it back to back with other
    function passes on each function, without rebuilding the module between them.
    """
    made = _make_decorator(
        FunctionPass, "transform_function", "function", pass_func, opt_level, name, required
    )
    if pass_func is not None:
        made.reads_module = bool(reads_module)
        return made

    def decorate(pass_arg: Callable | type) -> Any:
        result = made(pass_arg)
        result.reads_module = bool(reads_module)
        return result

    return decorate


def _make_decorator(
    pass_class: type[ModulePass] | type[FunctionPass],
    method: str,
    kind: str,
    pass_func: Callable | type | None,
    opt_level: int | None,
    name: str | None,
    required: Iterable[str] | None,
    infers_types: bool = False,
) -> Any:
    if opt_level is None:
        raise ValueError(f"Please provide opt_level for the {kind} pass.")
    if required is not None and not isinstance(required, (list, tuple)):
        raise PassArgumentError(
            f"required of a {kind} pass must be a list or tuple of names, got {required!r}"
        )
    required = tuple(required or ())

    def create(pass_arg: Callable | type) -> Any:
        pass_name = name or getattr(pass_arg, "__name__", None)
        if not pass_name:
            raise PassArgumentError(f"cannot name the {kind} pass built from {pass_arg!r}; pass name=")
        info = PassInfo(opt_level, pass_name, required, infers_types=infers_types)
        if inspect.isclass(pass_arg):
            return _wrap_class(pass_arg, pass_class, method, kind, info)
        if not callable(pass_arg):
            raise PassArgumentError(
                f"pass_func must be a callable for {kind.capitalize()} pass, got {pass_arg!r}"
            )
        return pass_class(pass_arg, info)

    return create(pass_func) if pass_func is not None else create


def _wrap_class(
    user_cls: type, pass_class: type[Pass], method: str, kind: str, info: PassInfo
) -> type:
    if not callable(getattr(user_cls, method, None)):
        raise PassArgumentError(f"{kind} pass class {user_cls.__name__} must define {method}")

    class ClassPass(pass_class):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            instance = user_cls(*args, **kwargs)
            self.__dict__["_wrapped_instance"] = instance
            pass_class.__init__(self, getattr(instance, method), info)

        def __getattr__(self, attr: str) -> Any:
            # only reached when normal lookup fails; guard against lookups made before
            # __init__ ran (e.g. while unpickling)
            instance = self.__dict__.get("_wrapped_instance")
            if instance is None:
                raise AttributeError(attr)
            return getattr(instance, attr)

    ClassPass.__name__ = user_cls.__name__
    ClassPass.__qualname__ = user_cls.__qualname__
    ClassPass.__module__ = user_cls.__module__
    ClassPass.__doc__ = user_cls.__doc__
    functools.update_wrapper(ClassPass.__init__, user_cls.__init__, updated=())
    return ClassPass
