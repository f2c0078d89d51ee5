"""raypass's pass infrastructure: the IR, passes, instruments, frontends, codegen, runtime.

Usable without Ray: ``Sequential([...])(mod)`` runs in-process.
"""

from passinfra import ir
from passinfra.runtime import evaluate

__version__ = "0.1.0"

from passinfra.build import build  # noqa: E402  (needs the IR and the passes above)
from passinfra.tuning import tune  # noqa: E402

__all__ = ["ir", "evaluate", "build", "tune", "__version__"]
