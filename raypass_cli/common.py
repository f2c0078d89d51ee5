"""What several ``raypass`` subcommands share: loading a MODEL, parsing option values,
the PassContext from the command line, and the user-error type.

Option values arrive as strings; everything here turns them into the typed values the
library expects and raises :class:`CliUserError` (exit status 2) naming the bad value.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import runpy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from passinfra.errors import RaypassError
from passinfra.interrupts import interrupts_deferred
from passinfra.ir.module import IRModule
from passinfra.transform import PassContext, get_pass, resolve_required
from passinfra.transform.config import config_type, legalize_value

EXIT_USER_ERROR = 2
ZOO_PREFIX = "zoo:"


class CliUserError(RaypassError):
    """A command-line mistake: a missing file, a malformed option value."""


# ----- MODEL ------------------------------------------------------------------------------
def load_model(
    spec: str,
    shapes: dict[str, list[int]] | None = None,
    dims: dict[str, tuple[int, int | None]] | None = None,
) -> IRModule:
    """An IRModule from a zoo spec (``zoo:transformer?layers=2``), an ``.onnx`` file or a
    text-IR file (anything else). A model that cannot be compiled as given (unreadable,
    undecodable, empty, ill-typed) is a user error naming the file, raised before anything
    is built or written. ``dims``: bounds of an ONNX model's symbolic dims (``--dim``)."""
    # the ONNX front end's first import loads onnx's extension module, which dies of a
    # segmentation fault when a KeyboardInterrupt arrives while it initializes: a Ctrl-C in
    # the first second of a compile is held back until the import is done
    if spec.startswith(ZOO_PREFIX):
        with interrupts_deferred():
            from passinfra.frontend import from_onnx
            from passinfra.frontend.zoo import zoo_spec

        return from_onnx(zoo_spec(spec), shapes, dims)
    path = _model_path(spec)
    if path.suffix == ".onnx":
        with interrupts_deferred():
            from passinfra.frontend import from_onnx

        return from_onnx(str(path), shapes, dims)  # OnnxImportError (a user error) names the file
    if shapes:
        raise CliUserError("--shapes applies to ONNX models only; a text-IR file states its own shapes")
    if dims:
        raise CliUserError("--dim applies to ONNX models only; a text-IR file states its own dims")
    return _load_text_ir(spec, path)


# collections of the young objects: one per this many allocations, not Python's 700 (a
# build allocates millions of short-lived IR nodes)
YOUNG_COLLECTION_ALLOCATIONS = 10_000


@contextmanager
def loaded_objects_frozen() -> Iterator[None]:
    """The build of a loaded model, with what is alive now (the interpreter's modules, the
    model's IR and weights) left out of the garbage collector's scans, and its young
    objects collected less often. A compile's objects are trees of immutable IR nodes
    (reference counting frees them); the collector finds next to nothing, but its scans of
    the whole heap were on the serial path: DenseNet-121's build in the driver spent
    100-107 ms in collections (a full one of ~70,000 objects: 55-65 ms), 23-27 ms with
    this. Restored afterwards (a process that had frozen objects before, a warm driver's
    command, keeps them frozen: it ends with the command)."""
    frozen_before = gc.get_freeze_count()
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if not frozen_before:
            gc.unfreeze()


def _model_path(spec: str) -> Path:
    path = Path(spec)
    if path.is_dir():
        raise CliUserError(f"model {spec!r} is a directory; give an .onnx file, a text-IR file or zoo:NAME")
    if not path.is_file():
        raise CliUserError(
            f"model file {spec!r} does not exist (give an .onnx file, a text-IR file or zoo:NAME)"
        )
    return path


def _load_text_ir(spec: str, path: Path) -> IRModule:
    from passinfra import ir
    from passinfra.errors import IRError, ParseError

    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise CliUserError(
            f"text-IR model {spec!r} is not UTF-8 text (byte {err.start}); "
            "an ONNX model needs the .onnx suffix"
        ) from None
    if not text.strip():
        raise CliUserError(f"text-IR model {spec!r} is empty")
    try:
        mod = ir.parse(text)
    except ParseError as err:
        raise CliUserError(f"text-IR model {spec!r}: {err}") from None
    if "main" not in mod:
        raise CliUserError(f"text-IR model {spec!r} has no function @main to compile")
    # the text is the user's program: check it here, so that a mistake in it is reported
    # as one, not as a failure of the first pass that happens to trip over it
    try:
        ir.verify_well_formed(mod)
        ir.infer_type(mod)
    except IRError as err:
        raise CliUserError(f"text-IR model {spec!r} is not a valid program: {err}") from None
    return mod


# ----- option values ----------------------------------------------------------------------
def parse_shapes(items: Sequence[str]) -> dict[str, list[int]]:
    """``["data=1,3,224,224"]`` -> ``{"data": [1, 3, 224, 224]}``."""
    shapes: dict[str, list[int]] = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.split(",") if d.strip()]
        except ValueError:
            raise CliUserError(
                f"bad --shapes value {item!r}; expected name=d0,d1,... (e.g. input=1,3,224,224)"
            ) from None
    return shapes


_DIM_OPTION = re.compile(r"([^=\s]+)=(\d+)\.\.(\d*)")


_SPECIALIZE_PART = re.compile(r"([^=,\s]+)=(\d+)")


def parse_dims(items: Sequence[str]) -> dict[str, tuple[int, int | None]]:
    """``["batch=1..64", "past=0.."]`` -> ``{"batch": (1, 64), "past": (0, None)}``
    (inclusive bounds; no upper bound: unbounded)."""
    dims: dict[str, tuple[int, int | None]] = {}
    for item in items:
        match = _DIM_OPTION.fullmatch(item.strip())
        lo, hi = (int(match[2]), int(match[3]) if match[3] else None) if match else (0, None)
        if match is None or (hi is not None and hi < lo):
            why = "" if match is None else f" (empty range: {lo} > {hi})"
            raise CliUserError(f"bad --dim value {item!r}{why}; expected NAME=LO..HI or NAME=LO.. "
                               "(e.g. batch=1..64, past=0..)")
        dims[match[1]] = (lo, hi)
    return dims


def parse_specializations(items: Sequence[str]) -> tuple[dict[str, int], ...]:
    """``["seq=1", "batch=1,seq=128"]`` -> ``({"seq": 1}, {"batch": 1, "seq": 128})``
    (config ``codegen.specialize``; whether the names are the model's dimensions is the
    build's check)."""
    found: list[dict[str, int]] = []
    for item in items:
        spec: dict[str, int] = {}
        for part in item.split(","):
            match = _SPECIALIZE_PART.fullmatch(part.strip())
            if match is None or match[1] in spec:
                why = "" if match is None else f" ({match[1]} given twice)"
                raise CliUserError(f"bad --specialize value {item!r}{why}; expected NAME=N[,NAME=N...] "
                                   "(e.g. seq=1 or batch=1,seq=128)")
            spec[match[1]] = int(match[2])
        found.append(spec)
    return tuple(found)


def split_names(values: Sequence[str]) -> list[str]:
    """Pass-name options may be repeated and/or comma separated."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def parse_config(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` strings converted to each key's registered type."""
    config: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise CliUserError(f"bad --config value {item!r}; expected key=value")
        expected = config_type(key)  # PassConfigError naming the known keys
        config[key] = legalize_value(key, _from_text(key, expected, text))
    return config


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _from_text(key: str, expected: type, text: str) -> Any:
    try:
        if expected is bool:
            lowered = text.strip().lower()
            if lowered not in _TRUE | _FALSE:
                raise ValueError
            return lowered in _TRUE
        if expected in (int, float, str):
            return expected(text)
        # containers are written as JSON: --config 'tir.UnrollLoop={"auto_max_step": 8}'
        return json.loads(text)
    except ValueError:
        raise CliUserError(f"config {key!r} expects a {expected.__name__}, got {text!r}") from None


def check_pass_names(required: Sequence[str], disabled: Sequence[str]) -> None:
    """Unknown names raise PassNotFoundError, a ``required`` cycle PassCycleError, now
    rather than halfway through a build."""
    for name in [*required, *disabled]:
        get_pass(name)
    for name in required:
        resolve_required(name)


# ----- the PassContext ------------------------------------------------------------------------
def add_context_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--opt-level", type=int, default=3, metavar="N", help="optimization level (default 3)"
    )
    parser.add_argument(
        "--disabled-pass",
        action="append",
        default=[],
        metavar="PASS[,PASS]",
        help="never run these passes (repeatable)",
    )
    parser.add_argument(
        "--required-pass",
        action="append",
        default=[],
        metavar="PASS[,PASS]",
        help="run these passes whatever the opt level (repeatable)",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="typed PassContext config, e.g. codegen.cflags=-O2 (repeatable)",
    )


def context_kwargs(args: argparse.Namespace, extra_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """PassContext keyword arguments (without instruments) from the parsed options."""
    required = split_names(args.required_pass)
    disabled = split_names(args.disabled_pass)
    check_pass_names(required, disabled)
    config = parse_config(args.config)
    config.update(extra_config or {})
    return {
        "opt_level": args.opt_level,
        "required_pass": required,
        "disabled_pass": disabled,
        "config": config,
    }


def make_context(args: argparse.Namespace, instruments: Sequence[Any] = ()) -> PassContext:
    return PassContext(instruments=list(instruments), **context_kwargs(args))


# ----- scheduler ------------------------------------------------------------------------
def add_scheduler_options(parser: argparse.ArgumentParser, default_backend: str = "auto") -> None:
    parser.add_argument(
        "--backend",
        choices=("local", "ray", "auto"),
        default=default_backend,
        help=f"where function passes run (default {default_backend})",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="Ray worker actors (default: one per CPU of the cluster)",
    )
    parser.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="connect to this Ray cluster (e.g. ray://head:10001 or auto)",
    )


def make_scheduler(args: argparse.Namespace) -> Any:
    from scheduler.scheduler import Scheduler

    if args.workers is not None and args.workers < 1:
        raise CliUserError(f"--workers must be at least 1, got {args.workers}")
    return Scheduler(backend=args.backend, num_workers=args.workers, address=args.address)


@contextmanager
def command_scheduler(args: argparse.Namespace) -> Iterator[Any]:
    """The command's scheduler, made at once (the ray backend starts its workers in the
    background while the model loads) and shut down without waiting for a private pool
    to finish stopping: the command is about to exit, and the pool stops on its own."""
    scheduler = make_scheduler(args)
    try:
        yield scheduler
    finally:
        scheduler.shutdown(wait=False)


# ----- plugins -----------------------------------------------------------------------------
def load_plugins(paths: Sequence[str]) -> None:
    """Run Python files that register passes, instruments or config keys."""
    for path in paths:
        if not Path(path).is_file():
            raise CliUserError(f"plugin file {path!r} does not exist")
        runpy.run_path(path, run_name="raypass_plugin")
