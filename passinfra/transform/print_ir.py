"""PrintIR: a module pass that writes the module's text to stderr and changes nothing."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass


@register_pass("PrintIR")
@dataclass(frozen=True)
class PrintIR(ModulePass):
    """A pass (opt_level 0) printing ``PrintIR(<header>):`` and the module to stderr."""

    header: str = ""
    show_meta_data: bool = False
    info: ClassVar[PassInfo] = PassInfo(0, "PrintIR")

    def pass_func(self, mod: IRModule, ctx: PassContext) -> IRModule:
        # look up sys.stderr at run time so redirection (and pytest's capsys) applies
        text = mod.astext(show_meta_data=self.show_meta_data)
        sys.stderr.write(f"PrintIR({self.header}):\n{text}\n")
        return mod
