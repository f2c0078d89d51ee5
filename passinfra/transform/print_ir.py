"""PrintIR: a module pass that writes the module's text to stderr and changes nothing."""

from __future__ import annotations

import sys

from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass


@register_pass("PrintIR")
def PrintIR(header: str = "", show_meta_data: bool = False) -> ModulePass:
    """A pass (opt_level 0) printing ``PrintIR(<header>):`` and the module to stderr."""

    def print_ir(mod: IRModule, ctx: PassContext) -> IRModule:
        # look up sys.stderr at run time so redirection (and pytest's capsys) applies
        text = mod.astext(show_meta_data=show_meta_data)
        sys.stderr.write(f"PrintIR({header}):\n{text}\n")
        return mod

    return ModulePass(print_ir, PassInfo(0, "PrintIR"))
