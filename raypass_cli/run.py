"""``raypass run LIB``: run a compiled library on given or random inputs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from raypass_cli.common import CliUserError

RANDOM = "random"


def random_input(shape: list[int], dtype: str, rng: np.random.Generator, high: int = 16) -> np.ndarray:
    """Normal floats; small non-negative ints (token ids must index an embedding)."""
    if np.issubdtype(np.dtype(dtype), np.integer):
        return rng.integers(0, high, size=shape).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.standard_normal(shape).astype(dtype)


def _sizes(lib: Any, items: list[str]) -> dict[str, int]:
    """``--dim NAME=N`` values: the sizes of a library's symbolic dimensions for its
    random inputs (the others take the smallest size their bounds allow, at least 1)."""
    names = [var.name for var in lib.dim_vars]
    sizes: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise CliUserError(f"bad --dim value {item!r}; expected NAME=N (a size of a symbolic dimension)")
        if name not in names:
            known = ", ".join(names) or "none: its shapes are static"
            raise CliUserError(f"the library has no symbolic dimension {name!r}; its dimensions: {known}")
        sizes[name] = int(value)
    return sizes


def _inputs(specs: list[dict[str, Any]], shapes: list[tuple[int, ...]], items: list[str],
            seed: int) -> list[np.ndarray]:
    given: dict[str, str] = {}
    for item in items:
        name, sep, source = item.partition("=")
        if not sep:
            raise CliUserError(f"bad --input {item!r}; expected name=file.npy or name=random")
        given[name] = source
    unknown = set(given) - {spec["name"] for spec in specs}
    if unknown:
        known = ", ".join(spec["name"] for spec in specs)
        raise CliUserError(f"the library has no input named {sorted(unknown)[0]!r}; its inputs: {known}")
    rng = np.random.default_rng(seed)
    arrays = []
    for spec, shape in zip(specs, shapes):
        source = given.get(spec["name"], RANDOM)
        if source == RANDOM:
            arrays.append(random_input(list(shape), spec["dtype"], rng))
            continue
        if not Path(source).is_file():
            raise CliUserError(f"input file {source!r} for {spec['name']!r} does not exist")
        arrays.append(np.load(source))
    return arrays


def _flatten(result: Any) -> list[np.ndarray]:
    stack, flat = [result], []
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(reversed(item))
        else:
            flat.append(np.asarray(item))
    return flat


def cmd_run(args: argparse.Namespace) -> int:
    from passinfra.runtime.module import load_module
    from passinfra.runtime.threads import ThreadCountError, checked_thread_count

    if args.threads is not None:
        try:
            checked_thread_count(args.threads, "--threads")
        except ThreadCountError as error:
            raise CliUserError(str(error)) from None
    if args.profile is not None and args.profile < 1:
        raise CliUserError(f"--profile takes a positive number of runs, got {args.profile}")
    if not Path(args.library).is_file():
        raise CliUserError(f"library {args.library!r} does not exist (write one with `raypass compile -o`)")
    lib = load_module(args.library)
    if args.threads is not None:
        lib.set_num_threads(args.threads)
    print(f"threads {lib.num_threads}")
    sizes = _sizes(lib, args.dim)
    shapes = lib.input_shapes(sizes)
    if lib.dim_vars:  # the sizes random inputs get (a given .npy input has its own)
        defaults = dict(zip((v.name for v in lib.dim_vars), (s for s in _default_sizes(lib))))
        print("dims " + " ".join(f"{name}={sizes.get(name, defaults[name])}" for name in defaults))
    arrays = _inputs(lib.metadata["inputs"], shapes, args.input, args.seed)
    for spec, array in zip(lib.metadata["inputs"], arrays):
        print(f"input  {spec['name']}: {array.shape} {array.dtype}")
    outputs = _flatten(lib(*arrays))
    profile = lib.profile(*arrays, runs=args.profile) if args.profile is not None else None
    if args.output:
        Path(args.output).mkdir(parents=True, exist_ok=True)
    for index, out in enumerate(outputs):
        summary = ""
        if out.size and np.issubdtype(out.dtype, np.number):
            summary = f" min {out.min():.6g} max {out.max():.6g} mean {out.mean():.6g} std {out.std():.6g}"
        print(f"output {index}: {out.shape} {out.dtype}{summary}")
        if args.output:
            path = Path(args.output) / f"output_{index}.npy"
            np.save(path, out)
            print(f"  saved to {path}")
    if profile is not None:
        print_profile(profile)
    return 0


PROFILE_ROWS = 20  # the slowest calls shown; the rest in one line


def print_profile(profile: Any) -> None:
    """The in-model profile (passinfra.runtime.profile.KernelProfile) as plain lines: the
    runs' median, the kernels' share of it, then the slowest calls."""
    run_ms, kernels_ms = profile.run_median * 1e3, profile.kernel_median * 1e3
    share = kernels_ms / run_ms if run_ms else 0.0
    print(f"profile: {profile.runs} runs, median {run_ms:.3f} ms a run, its kernel calls "
          f"{kernels_ms:.3f} ms ({share:.0%})")
    calls = profile.calls()
    shown = profile.slowest(PROFILE_ROWS)
    width = max((len(call.kernel) for call in shown), default=6)
    print(f"  {'call':>5}  {'kernel':<{width}}  {'ms a run':>9}  {'share':>6}")
    for call in shown:
        print(f"  {call.step:>5}  {call.kernel:<{width}}  {call.seconds * 1e3:>9.3f}  {call.share:>6.1%}")
    if len(calls) > len(shown):
        rest = sum(call.seconds for call in calls) - sum(call.seconds for call in shown)
        print(f"  ({len(calls) - len(shown)} more calls: {rest * 1e3:.3f} ms)")


def _default_sizes(lib: Any) -> list[int]:
    return [min(max(var.lo, 1), var.hi if var.hi is not None else max(var.lo, 1)) for var in lib.dim_vars]


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("run", help="run a compiled library and summarize its outputs")
    parser.add_argument("library", metavar="LIB", help="a library written by `raypass compile -o LIB`")
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy|random",
        help="an input array (default: random for every input)",
    )
    parser.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=N",
        help="the size of a symbolic dimension for the random inputs of a library compiled for "
        "dynamic shapes (default: the smallest its bounds allow, at least 1)",
    )
    parser.add_argument("--output", metavar="DIR", help="save every output as DIR/output_<i>.npy")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="threads of the library's parallel loops (default: the build's codegen.num_threads, "
        "or every CPU this process may use); results are the same for any N",
    )
    parser.add_argument(
        "--profile",
        type=int,
        nargs="?",
        const=10,
        default=None,
        metavar="RUNS",
        help="time every kernel call inside the model over RUNS runs (default 10) after the "
        "first, and print the slowest calls with their share of a run",
    )
    parser.set_defaults(func=cmd_run)

