"""The ``raypass`` command line.

It lives in ``scheduler`` because it drives everything (the scheduler depends on
passinfra, never the other way round). User errors print one line on stderr and exit
with status 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

import passinfra
from passinfra.errors import RaypassError

EXIT_USER_ERROR = 2


def _cmd_ops(args: argparse.Namespace) -> int:
    from passinfra.ir import list_ops

    ops = list_ops()
    width = max(len(op.name) for op in ops)
    print(f"{'op':<{width}}  {'pattern':<17}  {'inputs':>6}  stateful")
    for op in ops:
        inputs = "any" if op.num_inputs < 0 else str(op.num_inputs)
        stateful = "yes" if op.stateful else ""
        print(f"{op.name:<{width}}  {op.pattern.name.lower():<17}  {inputs:>6}  {stateful}")
    print(f"{len(ops)} ops")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from passinfra.frontend.models import demo_cnn

    mod = demo_cnn(batch=args.batch, seed=args.seed)
    print("# The demo model (conv2d -> batch_norm -> relu -> dense -> softmax), as text IR:")
    print(mod.astext(show_meta_data=False))
    data_type = mod["main"].params[0].type_annotation
    rng = np.random.default_rng(args.seed)
    data = rng.standard_normal(data_type.shape).astype(data_type.dtype)
    out = passinfra.evaluate(mod, data)
    print("# Reference interpreter:")
    print(f"input  {data.shape} {data.dtype}")
    print(f"output {out.shape} {out.dtype}; rows sum to {np.round(out.sum(axis=-1), 6).tolist()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raypass", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"raypass {passinfra.__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    ops = sub.add_parser("ops", help="list the registered ops with their fusion pattern kind")
    ops.set_defaults(func=_cmd_ops)

    demo = sub.add_parser("demo", help="build, print and run the embedded demo model")
    demo.add_argument("--batch", type=int, default=1)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USER_ERROR
    try:
        return args.func(args)
    except RaypassError as err:
        if args.debug:
            raise
        print(f"raypass: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
