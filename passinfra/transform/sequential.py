"""Sequential: a pass that runs a list of passes in order under the enabling rule."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.dependencies import resolve_required
from passinfra.transform.errors import PassArgumentError
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import Pass
from passinfra.transform.registry import get_pass


class Sequential(Pass):
    """Runs ``passes`` in order. Each is gated by ``ctx.pass_enabled(info)`` (disabled >
    required > opt_level); a nested Sequential is gated by its own info, then gates its
    own passes. Before each enabled pass its ``required`` passes run (transitively, in
    dependency order, every time, enabled or not), each instrumented like any pass.

    The Sequential itself is instrumented too: its should_run/before hooks come before
    those of the passes inside it, its after hooks after them.
    """

    def __init__(
        self,
        passes: Iterable[Pass] | None = None,
        opt_level: int = 0,
        name: str = "sequential",
        required: Iterable[str] | None = None,
    ) -> None:
        super().__init__(PassInfo(opt_level, name, required or ()))
        passes = [] if passes is None else passes
        if isinstance(passes, Pass) or not isinstance(passes, (list, tuple)):
            raise PassArgumentError(f"Sequential {name!r} takes a list or tuple of passes, got {passes!r}")
        for index, item in enumerate(passes):
            if not isinstance(item, Pass):
                raise PassArgumentError(
                    f"Sequential {name!r}: item {index} is {type(item).__name__}, not a Pass"
                )
        self.passes: tuple[Pass, ...] = tuple(passes)

    def enabled_steps(self, ctx: PassContext) -> Iterator[tuple[Pass, ...]]:
        """For each pass enabled under ``ctx``: ``(*dependencies, pass)`` in run order.

        Dependencies are fresh instances from the registry. The scheduler builds its plan
        from these steps; running them in order is exactly what this Sequential does.
        """
        for item in self.passes:
            if not ctx.pass_enabled(item.info):
                continue
            dependencies = [get_pass(name) for name in resolve_required(item)] if item.info.required else []
            yield (*dependencies, item)

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        for step in self.enabled_steps(ctx):
            for item in step:
                mod = item.run(mod, ctx)
        return mod

    def __repr__(self) -> str:
        inner = ", ".join(item.info.name for item in self.passes)
        return f"Sequential({self.info.name!r}, opt_level={self.info.opt_level}, passes=[{inner}])"
