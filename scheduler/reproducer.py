"""Reproducers of failed runs: write one, replay it in-process.

A reproducer is a text file: a few ``#`` header lines (the failing pass and function,
the error, the PassContext as JSON, the remaining pipeline as registered pass names from
the start of the failing stage) followed by the text IR of the module slice (the
failing function and every function it references, as they were when the stage began).
``replay(path)`` parses it and runs the pipeline in-process under the same context, so
the same error is raised without Ray.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from passinfra import ir
from passinfra.errors import RaypassError
from passinfra.ir.expr import GlobalVar
from passinfra.ir.functor import iter_post_order
from passinfra.ir.module import IRModule
from passinfra.transform import PassContext, get_pass

MAGIC = "# raypass reproducer v1"


class ReproducerError(RaypassError, ValueError):
    """A reproducer file that cannot be read."""


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


def write_reproducer(
    directory: str | Path,
    mod: IRModule,
    function: str,
    pass_name: str,
    pipeline: list[str],
    ctx: PassContext,
    error: BaseException,
) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{pass_name}-{function}")
    path = directory / f"repro-{safe}.txt"
    spec = ctx.to_spec()
    spec["config"] = {k: v for k, v in spec.get("config", {}).items() if k != "scheduler.reproducer_dir"}
    message = " ".join(f"{type(error).__name__}: {error}".split())
    header = [
        MAGIC,
        f"# pass: {pass_name}",
        f"# function: {function}",
        f"# error: {message}",
        f"# context: {json.dumps(spec, sort_keys=True, default=str)}",
        f"# pipeline: {json.dumps(pipeline)}",
    ]
    text = module_slice(mod, function).astext()
    path.write_text("\n".join(header) + "\n" + text)
    return path


def read_reproducer(path: str | Path) -> tuple[IRModule, list[str], PassContext, dict[str, str]]:
    text = Path(path).read_text()
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
        pipeline = json.loads(fields["pipeline"])
    except (KeyError, json.JSONDecodeError) as err:
        raise ReproducerError(f"{path}: broken header ({err})") from None
    mod = ir.parse("\n".join(body_lines))
    return mod, pipeline, PassContext.from_spec(spec), fields


def replay(path: str | Path) -> IRModule:
    """Re-run a reproducer in-process; raises what the original run raised."""
    mod, pipeline, ctx, _ = read_reproducer(path)
    passes = [get_pass(name) for name in pipeline]
    with ctx:
        # the names are the plan's leaves (already enabled, dependencies included), so
        # each runs directly: no second round of gating or dependency resolution
        for pass_ in passes:
            mod = pass_(mod)
    return mod
