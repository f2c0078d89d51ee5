"""Reproducers of failed runs: write one, replay it in-process.

A reproducer is a text file: a few ``#`` header lines (the failing pass and function,
the error and its type, the PassContext as JSON, the remaining pipeline from the start of
the failing stage, and where the pipeline's non-built-in passes came from) followed by
the text IR of the module slice (the failing function and every function it references,
as they were when the stage began).

The pipeline is a JSON list with one entry per pass: the registered name of a pass
without options, ``{"name": ..., "options": {...}}`` for a pass with options (see
``passinfra.transform.pass_options``), so the replay rebuilds exactly the passes that
ran. Files written before options were recorded hold names only; they still replay.

``replay(path)`` loads what defined the passes (importable modules, and plugin files run
with ``--plugin`` that still exist), parses the slice and runs the pipeline in-process
under the same context, so the same error is raised without Ray. :func:`run_replay`
says whether what happened is the recorded failure: the same exception type, from the
same pass, on the same function.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import runpy
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from passinfra import ir
from passinfra.errors import RaypassError
from passinfra.ir.expr import GlobalVar
from passinfra.ir.functor import iter_post_order
from passinfra.ir.module import IRModule
from passinfra.transform import Pass, PassContext, Sequential
from passinfra.transform.errors import PassArgumentError, PassNotFoundError
from passinfra.transform.pass_options import configured_pass, pass_options
from passinfra.transform.registry import is_registered, registered_factory

MAGIC = "# raypass reproducer v1"
# the module name plugin files run under (as ``raypass compile --plugin`` runs them), so a
# plugin's exception type has the same qualified name in the replay as in the original run
PLUGIN_RUN_NAME = "raypass_plugin"
# what passinfra.transform.passes notes on an error raised by a function pass
_FUNCTION_NOTE = re.compile(r"raised by function pass '(?P<pass_name>.*)' on function '(?P<function>.*)'")


class ReproducerError(RaypassError, ValueError):
    """A reproducer file that cannot be read."""


@dataclass(frozen=True)
class PassSpec:
    """One pipeline entry of a reproducer: a registered pass name and the options the pass
    was made with (None: recorded by name, so the registry's default configuration)."""

    name: str
    options: dict[str, Any] | None = None

    @classmethod
    def of(cls, pass_: Pass | str) -> PassSpec:
        """The entry recording ``pass_`` (a pass, or already a name)."""
        if isinstance(pass_, str):
            return cls(pass_)
        name, options = pass_.info.name, pass_options(pass_)
        # options are recorded only where the registry makes this very class under the
        # pass's name (else the replay could not pass them on), and only when JSON holds
        # them; otherwise the name is the best record there is, as for a pass without options
        if not options or not is_registered(name) or registered_factory(name) is not type(pass_):
            return cls(name)
        try:
            json.dumps(options)
        except (TypeError, ValueError):
            return cls(name)
        return cls(name, options)

    @classmethod
    def from_json(cls, entry: Any) -> PassSpec:
        if isinstance(entry, str):  # a pass without options, or a file older than options
            return cls(entry)
        if isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(
            entry.get("options", {}), dict
        ):
            return cls(entry["name"], entry.get("options"))
        raise ReproducerError(f"a pipeline entry is a pass name or {{'name', 'options'}}, got {entry!r}")

    def to_json(self) -> str | dict[str, Any]:
        return self.name if self.options is None else {"name": self.name, "options": self.options}

    def build(self) -> Pass:
        """The pass this entry records, made through the registry."""
        try:
            return configured_pass(self.name, self.options)
        except PassArgumentError as error:  # the pass changed since the file was written
            raise ReproducerError(str(error)) from None


def module_slice(mod: IRModule, name: str) -> IRModule:
    """``name`` and every function reachable from it through GlobalVar references."""
    keep: list[str] = []
    work = [name]
    seen = {name}
    while work:
        current = work.pop()
        keep.append(current)
        func = mod[current]
        if not isinstance(func, ir.Function):
            continue
        for node in iter_post_order(func):
            if isinstance(node, GlobalVar) and node.name_hint not in seen and node in mod:
                seen.add(node.name_hint)
                work.append(node.name_hint)
    kept = set(keep)
    return IRModule({gv: f for gv, f in mod.items() if gv.name_hint in kept}, attrs=mod.attrs)


# ----- writing --------------------------------------------------------------------------------
def write_reproducer(
    directory: str | Path,
    mod: IRModule,
    function: str,
    pass_name: str,
    pipeline: Sequence[Pass | str],
    ctx: PassContext,
    error: BaseException,
) -> Path:
    """Write the reproducer of ``error``, raised by pass ``pass_name`` on ``function``;
    ``pipeline`` is what was to run from the start of the failing stage (passes, whose
    options are recorded, or registered names)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{pass_name}-{function}")
    path = directory / f"repro-{safe}.txt"
    spec = ctx.to_spec()
    spec["config"] = {k: v for k, v in spec.get("config", {}).items() if k != "scheduler.reproducer_dir"}
    message = " ".join(f"{type(error).__name__}: {error}".split())
    steps = [PassSpec.of(pass_) for pass_ in pipeline]
    plugins, modules = pass_sources([pass_name, *(step.name for step in steps)])
    header = [
        MAGIC,
        f"# pass: {pass_name}",
        f"# function: {function}",
        f"# error: {message}",
        f"# error_type: {qualified_name(type(error))}",
        f"# context: {json.dumps(spec, sort_keys=True, default=str)}",
        f"# pipeline: {json.dumps([step.to_json() for step in steps])}",
        f"# plugins: {json.dumps(plugins)}",
        f"# modules: {json.dumps(modules)}",
        f"# module_paths: {json.dumps(module_roots(modules))}",
    ]
    text = module_slice(mod, function).astext()
    path.write_text("\n".join(header) + "\n" + text)
    return path


def qualified_name(cls: type) -> str:
    """``module.qualname`` of an exception type (``raypass_plugin.BoomError``)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def pass_sources(names: Iterable[str]) -> tuple[list[str], list[str]]:
    """Where the registered passes ``names`` were defined, outside raypass itself:
    ``(plugin files, importable modules)``. A plugin file (run by ``--plugin``) is
    recorded by absolute path; a module that can be imported again, by name."""
    plugins: list[str] = []
    modules: list[str] = []
    for name in dict.fromkeys(names):
        origin = _factory_origin(registered_factory(name)) if is_registered(name) else None
        if origin is None:
            continue
        kind, where = origin
        target = plugins if kind == "plugin" else modules
        if where not in target:
            target.append(where)
    return plugins, modules


def module_roots(modules: Iterable[str]) -> list[str]:
    """The directories the loaded ``modules`` were imported from (the ``sys.path`` entry
    each was found under): a module next to a script, imported because Python put the
    script's directory on the path, is not importable from ``raypass replay`` without it."""
    roots: list[str] = []
    for name in modules:
        loaded = sys.modules.get(name)
        file = getattr(loaded, "__file__", None)
        if not file:
            continue
        depth = name.count(".") + (1 if Path(file).name == "__init__.py" else 0)
        root = str(Path(file).resolve().parents[depth])
        if root not in roots:
            roots.append(root)
    return roots


def _factory_origin(factory: Any) -> tuple[str, str] | None:
    module = getattr(factory, "__module__", None) or ""
    if module == "passinfra" or module.startswith("passinfra.") or module == "__main__":
        return None  # built in (always there), or a script that must not run twice
    if module == PLUGIN_RUN_NAME:
        try:
            source = inspect.getsourcefile(factory)
        except TypeError:  # e.g. a callable instance: its class has the plugin's module
            source = getattr(getattr(factory, "__code__", None), "co_filename", None)
        # resolved now: the plugin was run relative to this process's working directory
        return ("plugin", str(Path(source).resolve())) if source and Path(source).is_file() else None
    loaded = sys.modules.get(module)
    return ("module", module) if loaded is not None and getattr(loaded, "__file__", None) else None


# ----- reading --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reproducer:
    """A reproducer's header fields and its IR text, before anything is loaded or parsed
    (the IR and the context may need what the plugins register)."""

    path: Path
    fields: dict[str, str]
    steps: list[PassSpec]
    context_spec: dict[str, Any]
    plugins: list[str]
    modules: list[str]
    body: str
    module_paths: list[str] = field(default_factory=list)  # where the modules were found

    @property
    def pipeline(self) -> list[str]:
        """The pipeline's pass names (``steps`` has their options)."""
        return [step.name for step in self.steps]

    @property
    def pass_name(self) -> str:
        return self.fields.get("pass", "?")

    @property
    def function(self) -> str:
        return self.fields.get("function", "?")

    @property
    def error_type(self) -> str:
        """The recorded exception type: qualified, or only its name in older files."""
        return self.fields.get("error_type") or self.fields.get("error", "?").split(":", 1)[0]


def read_header(path: str | Path) -> Reproducer:
    path = Path(path)
    text = path.read_text()
    if not text.startswith(MAGIC):
        raise ReproducerError(f"{path} is not a raypass reproducer (no '{MAGIC}' header)")
    fields: dict[str, str] = {}
    body_lines = []
    for line in text.splitlines():
        match = re.match(r"# (\w+): (.*)$", line)
        if match and not body_lines:
            fields[match.group(1)] = match.group(2)
        elif line != MAGIC:
            body_lines.append(line)
    try:
        spec = json.loads(fields["context"])
        entries = json.loads(fields["pipeline"])
        plugins = json.loads(fields.get("plugins", "[]"))
        modules = json.loads(fields.get("modules", "[]"))
        module_paths = json.loads(fields.get("module_paths", "[]"))
    except (KeyError, json.JSONDecodeError) as err:
        raise ReproducerError(f"{path}: broken header ({err})") from None
    if not isinstance(entries, list):
        raise ReproducerError(f"{path}: broken header (the pipeline is not a list: {entries!r})")
    steps = [PassSpec.from_json(entry) for entry in entries]
    return Reproducer(path, fields, steps, spec, plugins, modules, "\n".join(body_lines), module_paths)


def read_reproducer(path: str | Path) -> tuple[IRModule, list[str], PassContext, dict[str, str]]:
    """``(module slice, pipeline pass names, context, header fields)``; what defined the
    passes must be loaded already (see :func:`load_pass_sources`). The passes' options are
    in ``read_header(path).steps``."""
    repro = read_header(path)
    return ir.parse(repro.body), repro.pipeline, PassContext.from_spec(repro.context_spec), repro.fields


# ----- loading what defined the passes -------------------------------------------------------
def load_pass_sources(repro: Reproducer, plugins: Sequence[str] = ()) -> None:
    """Import the recorded modules, then run ``plugins`` if any are given (they replace
    the recorded plugin files: the user knows where the plugin is now), else the recorded
    plugin files that still exist; then raise PassNotFoundError naming the first pipeline
    pass still not registered."""
    missing_sources: list[str] = []
    # where the original run found a module is searched only when no plugin is given: a
    # plugin the user names is where the passes are now (often that very module's file)
    search = [] if plugins else [*repro.module_paths, os.getcwd()]
    for module in repro.modules:
        try:
            _import_recorded(module, search)
        except ImportError as error:
            missing_sources.append(f"module {module!r} ({error})")
    for plugin in plugins:
        if not Path(plugin).is_file():
            raise ReproducerError(f"plugin file {str(plugin)!r} does not exist")
        runpy.run_path(str(plugin), run_name=PLUGIN_RUN_NAME)
    for plugin in () if plugins else repro.plugins:
        if Path(plugin).is_file():
            runpy.run_path(plugin, run_name=PLUGIN_RUN_NAME)
        else:
            missing_sources.append(f"plugin file {plugin!r} (it no longer exists)")
    for name in repro.pipeline:
        if not is_registered(name):
            raise PassNotFoundError(_missing_pass_message(name, missing_sources))


def _import_recorded(module: str, search: list[str]) -> None:
    """Import ``module``; failing that, again with ``search`` (where the original run
    found it, then the working directory, as ``python script.py`` would) on the path."""
    try:
        importlib.import_module(module)
        return
    except ImportError:
        added = [entry for entry in search if os.path.isdir(entry) and entry not in sys.path]
    sys.path[:0] = added  # left in place: the imported module may import its neighbours
    importlib.import_module(module)


def _missing_pass_message(name: str, missing_sources: list[str]) -> str:
    where = f"; not loaded from the original run: {', '.join(missing_sources)}" if missing_sources else ""
    return (
        f"the reproducer runs pass {name!r}, which is not registered{where}; load the file "
        f"that registers it with --plugin FILE.py"
    )


# ----- replaying ------------------------------------------------------------------------------
@dataclass
class ReplayFailure:
    """An exception the replay raised, and where: the pipeline pass and the function
    (None when a module pass failed: it runs on the whole slice, not per function)."""

    pass_name: str
    function: str | None
    error: BaseException

    @property
    def error_type(self) -> str:
        return qualified_name(type(self.error))

    def describe(self) -> str:
        where = f"in pass {self.pass_name!r}"
        if self.function is not None:
            where += f" on function {self.function!r}"
        message = str(self.error).splitlines()[0] if str(self.error) else ""
        return f"{type(self.error).__name__} {where}: {message}"


@dataclass
class ReplayResult:
    repro: Reproducer
    module: IRModule | None = None  # what the pipeline produced, when it finished
    failure: ReplayFailure | None = None

    @property
    def reproduced(self) -> bool:
        """The recorded failure happened again: same exception type, same pass, same
        function (a module pass's failure counts as on the slice's function)."""
        failure = self.failure
        if failure is None:
            return False
        recorded = self.repro.error_type
        # older files record the type's name only
        actual = failure.error_type if "." in recorded else type(failure.error).__name__
        same_type = actual == recorded
        same_function = failure.function is None or failure.function == self.repro.function
        return same_type and failure.pass_name == self.repro.pass_name and same_function


def run_replay(path: str | Path, plugins: Sequence[str] = ()) -> ReplayResult:
    """Load the reproducer's pass sources (see :func:`load_pass_sources`), then run its
    pipeline on its slice in-process. Errors of the replay itself (a broken file, a pass
    that cannot be found) raise; an exception of a pass is caught and returned in the
    result, with where it happened."""
    repro = read_header(path)
    load_pass_sources(repro, plugins)
    mod = ir.parse(repro.body)
    ctx = PassContext.from_spec(repro.context_spec)
    result = ReplayResult(repro)
    passes = [(step.name, step.build()) for step in repro.steps]
    with ctx:
        # the names are the plan's leaves (already enabled, dependencies included), so
        # each runs directly: no second round of gating or dependency resolution
        for name, pass_ in passes:
            try:
                mod = pass_(mod)
            except Exception as error:
                result.failure = _locate(name, pass_, error)
                return result
    result.module = mod
    return result


def _locate(name: str, pass_: Any, error: BaseException) -> ReplayFailure:
    """Where ``error`` came from. The pipeline names plan leaves, so the pass is the one
    run (or, for a pass registered as a Sequential, its outermost failing function pass);
    the function is named by the note the function-pass loop adds to the error."""
    sites = [m for m in map(_FUNCTION_NOTE.fullmatch, getattr(error, "__notes__", ())) if m]
    if isinstance(pass_, Sequential):
        if sites:
            return ReplayFailure(sites[-1]["pass_name"], sites[-1]["function"], error)
        return ReplayFailure(name, None, error)
    own = [m for m in sites if m["pass_name"] == name]
    return ReplayFailure(name, own[-1]["function"] if own else None, error)


def replay(path: str | Path, plugins: Sequence[str] = ()) -> IRModule:
    """Re-run a reproducer in-process; raises what the original run raised.

    ``plugins``: Python files registering the passes, run instead of the plugin files the
    reproducer recorded (which are run when none are given); recorded modules are imported.
    """
    result = run_replay(path, plugins)
    if result.failure is not None:
        raise result.failure.error
    assert result.module is not None
    return result.module


__all__ = [
    "PassSpec", "ReplayFailure", "ReplayResult", "Reproducer", "ReproducerError", "load_pass_sources",
    "module_slice", "pass_sources", "qualified_name", "read_header", "read_reproducer", "replay",
    "run_replay", "write_reproducer",
]
