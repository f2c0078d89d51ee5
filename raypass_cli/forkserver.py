"""The warm driver: ``raypass compile`` without the interpreter's start-up and imports.

A ``raypass compile`` process spends its first 0.3-0.8 s (2.1 s on the 16-core machine)
starting Python and importing numpy, networkx, onnx and the compiler before it reads the
model: on a warm pool that is as long as DenseNet-121's whole build. A warm pool
therefore also keeps a *warm driver*: a process that imported all of that once and
forks a child per command. The ``raypass`` command (``raypass_cli.main.cli``) first
asks it to run the command; the child becomes the command the user typed:

* its standard input, output and error are the caller's own (passed over the Unix
  socket), its working directory, environment and ``argv`` are the caller's, so output,
  files, exit status and errors are those of a fresh process;
* Ctrl-C in the caller (and SIGTERM) reaches the child's process group, as the
  terminal's would, and the caller exits with the child's status;
* a caller that dies takes its command with it (the warm driver interrupts the child);
* the child tells its caller its exit status itself: a warm driver that dies meanwhile
  loses nothing.

It serves only what a fresh process would do the same way: the same interpreter, the
same import path after its first entry, the same raypass sources (sizes and
modification times), and the same process-wide settings fixed at start-up (thread counts
of the BLAS, hash seed, warnings, preloads). Anything else, or no warm driver, or
``RAYPASS_FORKSERVER=0``: the command runs in the calling process as before.

``raypass pool start`` starts it beside the warm pool (``raypass_cli.pool``; the library
knows nothing of it), ``raypass pool stop`` stops it, and it stops by itself when the
pool's daemon is gone; the commands it started run on to their end. Its record
(``forkserver.json`` in the pool's directory) holds the socket and the number of commands
served. This module imports nothing heavy at the top: the client side runs before
anything else is loaded.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys
import time
import zlib
from pathlib import Path
from typing import Any

RECORD_FILE = "forkserver.json"
SWITCH_ENV = "RAYPASS_FORKSERVER"  # "0", "off", "no", "false": never use a warm driver
SERVED_COMMANDS = frozenset({"compile"})
# process-wide settings read once when a process starts (the BLAS's thread pool, the hash
# seed, warning filters, preloaded libraries): a child of a warm driver started under
# other values would not be the process the caller asked for
START_SETTINGS = (
    "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED",
    "PYTHONWARNINGS", "PYTHONDEVMODE", "PYTHONMALLOC", "PYTHONOPTIMIZE", "PYTHONUTF8", "PYTHONSAFEPATH",
    "LD_PRELOAD", "LD_LIBRARY_PATH",
)
PACKAGES = ("passinfra", "scheduler", "workers", "raypass_cli")
_POLL_SECONDS = 0.5
_STOP_SECONDS = 15.0  # what `stop` waits for the warm driver to exit before it kills it
_FALSE = {"0", "off", "no", "false"}


# ----- shared by both sides ---------------------------------------------------------------
def pool_dir() -> Path:
    """``scheduler.pool.pool_dir`` (the same rule), without importing that package: it
    imports the compiler, which is what the client side exists to avoid."""
    explicit = os.environ.get("RAYPASS_POOL_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "raypass" / "pool"


def source_fingerprint() -> str:
    """The raypass sources this process would run: paths, sizes and modification times
    of its packages' files (a warm driver started before an edit must not serve)."""
    root = Path(__file__).resolve().parent.parent
    lines = [str(root)]
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            info = path.stat()
            lines.append(f"{path.relative_to(root)}:{info.st_size}:{info.st_mtime_ns}")
    # a checksum (zlib's: hashlib's import alone costs the command 20 ms) of a listing
    # that changes whenever a file does; no adversary picks the collisions here
    text = "\n".join(lines).encode()
    return f"{zlib.crc32(text):08x}{zlib.adler32(text):08x}{len(lines)}"


def _identity(environ: dict[str, str] | os._Environ[str]) -> dict[str, Any]:
    """What must be equal between a caller and the warm driver for a child to be the
    process the caller would have been."""
    return {
        "executable": os.path.realpath(sys.executable),
        "flags": [repr(sys.flags), sorted(sys._xoptions)],  # -X importtime, -O, -I, ...
        "path": sys.path[1:],  # the first entry is the script's or working directory
        "fingerprint": source_fingerprint(),
        "settings": {name: environ.get(name) for name in START_SETTINGS},
    }


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    conn.sendall(struct.pack("!I", len(data)) + data)


def _receive(conn: socket.socket) -> dict[str, Any] | None:
    """The next message, or None when the other side closed the connection."""
    header = _read_exactly(conn, 4)
    if header is None:
        return None
    data = _read_exactly(conn, struct.unpack("!I", header)[0])
    return None if data is None else json.loads(data)


def _read_exactly(conn: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = conn.recv(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ----- the client: the `raypass` command --------------------------------------------------
def command_of(argv: list[str]) -> str | None:
    """The subcommand of a ``raypass`` command line (the global options take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def run_in_warm_driver(argv: list[str]) -> int | None:
    """Run ``raypass ARGV`` in a child of the warm driver; its exit status, or None when
    no warm driver can take it (the caller then runs the command itself)."""
    if os.environ.get(SWITCH_ENV, "").strip().lower() in _FALSE or not hasattr(socket, "send_fds"):
        return None
    if command_of(argv) not in SERVED_COMMANDS:
        return None
    from raypass_cli.process_start import process_start_time

    started = process_start_time()
    identity = _identity(os.environ)
    try:
        record = json.loads((pool_dir() / RECORD_FILE).read_text())
        if record.get("identity") != identity:
            return None
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(record["socket"])
    except (OSError, ValueError, KeyError, TypeError):  # none, a stale record, a foreign file
        return None
    sigint_ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    with conn, _Forwarding() as forwarding:  # from before the request: no signal slips by
        try:
            socket.send_fds(conn, [b"R"], [0, 1, 2])
            streams = (sys.stdin, sys.stdout, sys.stderr)
            _send(conn, {
                "argv": [sys.argv[0], *argv], "path0": sys.path[0], "cwd": os.getcwd(),
                "environ": dict(os.environ), "started": started,
                "sigint_ignored": sigint_ignored, "umask": _umask(), "identity": identity,
                "streams": [[stream.encoding, stream.errors] for stream in streams],
            })
            reply = _receive(conn)
        except (OSError, ValueError, AttributeError):  # it went away, or a closed standard stream
            reply = None
        if reply is None or "pid" not in reply:  # refused (another identity since the record
            if forwarding.interrupted:  # was written) or gone; Ctrl-C meanwhile: no command ran
                print("raypass: interrupted", file=sys.stderr)
                return 130
            return None
        forwarding.start(int(reply["pid"]))
        try:
            reply = _receive(conn)  # a forwarded signal does not interrupt it (PEP 475)
        except OSError:
            reply = None
    if reply is None:  # the command died of a signal, and the warm driver with it
        print("raypass: error: the command and its warm driver (raypass pool) died", file=sys.stderr)
        return 1
    status = int(reply["exit"])
    return 128 - status if status < 0 else status  # a signal's death, as a shell shows it


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class _Forwarding:
    """While the caller waits: Ctrl-C and SIGTERM go to its command's process group, Ctrl-Z
    stops the command with the caller and ``fg``/``bg`` resume both. A signal that comes
    before the command's pid is known is held and forwarded then. A signal the caller
    ignores (started with Ctrl-C ignored, in the background) its command ignores too."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.held: list[int] = []
        self.previous: dict[int, Any] = {}

    @property
    def interrupted(self) -> bool:
        return any(signum in (signal.SIGINT, signal.SIGTERM) for signum in self.held)

    def __enter__(self) -> _Forwarding:
        handlers = {signal.SIGINT: self._forward, signal.SIGTERM: self._forward,
                    signal.SIGTSTP: self._suspend}
        self.previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()
                         if signal.getsignal(sig) != signal.SIG_IGN}
        return self

    def __exit__(self, *_: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def start(self, pid: int) -> None:
        self.pid = pid
        for signum in self.held:
            (self._suspend if signum == signal.SIGTSTP else self._forward)(signum, None)
        self.held.clear()

    def _signal(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError, TypeError):
            pass

    def _forward(self, signum: int, _frame: Any) -> None:
        if self.pid is None:
            self.held.append(signum)
        else:
            self._signal(signum)

    def _suspend(self, signum: int, _frame: Any) -> None:
        if self.pid is None:
            self.held.append(signum)
            return
        self._signal(signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # this process stops here until continued
        signal.signal(signal.SIGTSTP, self._suspend)
        self._signal(signal.SIGCONT)


# ----- the server -------------------------------------------------------------------------
def preload() -> None:
    """Import what a compile uses: the command line, every pass, the code generator, the
    ONNX front end and the model zoo, the tables, and a warm pool's client side (all but
    Ray itself, which a compile on a pool never imports and this process must not: it
    forks)."""
    import cloudpickle  # noqa: F401
    import numpy.ma  # noqa: F401
    import onnx  # noqa: F401
    import rich.console  # noqa: F401
    import rich.table  # noqa: F401
    import scipy_openblas32  # noqa: F401

    import passinfra.build  # noqa: F401
    import passinfra.frontend.onnx  # noqa: F401
    import passinfra.frontend.zoo  # noqa: F401
    import raypass_cli.main
    import raypass_cli.progress  # noqa: F401
    import raypass_cli.report  # noqa: F401
    import scheduler.pool.gateway  # noqa: F401
    import scheduler.ray_runner  # noqa: F401

    raypass_cli.main.build_parser()  # imports every subcommand's module
    # a table rendered once: rich imports the rest of what printing one takes lazily
    import io

    table = rich.table.Table("pass", title="warm-up")
    table.add_row(":-)")
    rich.console.Console(file=io.StringIO()).print(table)


class WarmDriver:
    def __init__(self, directory: Path, pool_pid: int) -> None:
        self.directory = directory
        self.pool_pid = pool_pid  # the warm pool's daemon: this process stops with it
        self.record_path = directory / RECORD_FILE
        import tempfile

        self.socket_dir = Path(tempfile.mkdtemp(prefix="raypass-driver-"))  # 0700, a short path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.socket_dir / "socket"))
        self.listener.listen(64)
        self.identity = _identity(os.environ)
        self.children: dict[int, socket.socket] = {}  # running commands: pid -> its caller
        self.abandoned: set[int] = set()  # of those, the ones whose caller went away
        self.wake_read, self.wake_write = os.pipe()
        self.served = 0
        self.stopping = False

    def write_record(self) -> None:
        record = {"pid": os.getpid(), "socket": str(self.socket_dir / "socket"), "identity": self.identity,
                  "served": self.served, "running": len(self.children)}
        temporary = self.record_path.with_name(f".{RECORD_FILE}.{os.getpid()}")
        temporary.write_text(json.dumps(record))
        os.replace(temporary, self.record_path)

    def remove_record(self) -> None:
        try:
            if json.loads(self.record_path.read_text()).get("pid") == os.getpid():
                self.record_path.unlink()
        except (OSError, ValueError):
            pass
        for path in (self.socket_dir / "socket", self.socket_dir):
            try:
                path.rmdir() if path.is_dir() else path.unlink()
            except OSError:
                pass

    def serve(self) -> int:
        wake_read = self.wake_read
        os.set_blocking(self.wake_write, False)
        signal.set_wakeup_fd(self.wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the loop: a command ended
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        self.write_record()
        print(f"raypass warm driver: serving at {self.socket_dir / 'socket'}", flush=True)
        # Stopping (asked to, or its pool is gone) ends this process at once: the commands
        # it runs go on, each telling its own caller how it ended (they are the user's
        # commands, not the pool's)
        try:
            while not self.stopping and _alive(self.pool_pid):
                watched = [wake_read, self.listener,
                           *(c for p, c in self.children.items() if p not in self.abandoned)]
                try:
                    readable, _, _ = select.select(watched, [], [], _POLL_SECONDS)
                except InterruptedError:
                    continue
                if wake_read in readable:
                    os.read(wake_read, 512)
                if self.listener in readable:
                    self._accept()
                for pid, conn in list(self.children.items()):
                    if conn in readable and pid not in self.abandoned and _closed(conn):
                        self.abandoned.add(pid)
                        self._interrupt(pid)  # its caller is gone: so is the command
                self._reap()
        finally:
            self.listener.close()
            self.remove_record()
        return 0

    def _stop(self, *_: object) -> None:
        self.stopping = True

    def _interrupt(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGINT)
        except (ProcessLookupError, PermissionError):
            pass

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
            if uid != os.getuid():  # only its own user's commands
                conn.close()
                return
            conn.settimeout(10.0)
            _, fds, _, _ = socket.recv_fds(conn, 1, 3)
            request = _receive(conn)
            conn.settimeout(None)
            if request is None or len(fds) != 3 or request.get("identity") != self.identity:
                _send(conn, {"refused": "another interpreter, import path, source or setting"})
                conn.close()
                return
        except (OSError, ValueError):
            conn.close()
            for fd in fds:
                os.close(fd)
            return
        pid = os.fork()
        if pid == 0:
            self._become_command(conn, request, fds)  # never returns
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.served += 1
        try:
            _send(conn, {"pid": pid})
        except OSError:
            self._interrupt(pid)
        self.write_record()

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            self.abandoned.discard(pid)
            if conn is None:
                continue
            try:
                _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass
            conn.close()
            if not self.stopping:
                self.write_record()

    def _become_command(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """In the forked child: turn into the caller's command, run it, exit."""
        try:
            os.setpgid(0, 0)  # the caller's Ctrl-C reaches this command's group, compilers too
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGTERM, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            # as a fresh interpreter does: Ctrl-C raises KeyboardInterrupt unless ignored
            interrupt = signal.SIG_IGN if request.get("sigint_ignored") else signal.default_int_handler
            signal.signal(signal.SIGINT, interrupt)
            # the caller's connection stays open here too: this process tells it its exit
            # status itself, so a warm driver that dies meanwhile loses nothing
            for sock in (self.listener, *self.children.values()):
                sock.close()
            os.close(self.wake_read)
            os.close(self.wake_write)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(request["cwd"])
            os.umask(int(request["umask"]))  # the files it writes get the caller's permissions
            os.environ.clear()
            os.environ.update(request["environ"])
            _reopen_streams(request["streams"])
            sys.argv = list(request["argv"])
            sys.path[0] = request["path0"]  # what the caller's first import path entry was
            from raypass_cli import main
            from raypass_cli.process_start import set_command_start

            set_command_start(float(request["started"]))
            main.exit_quickly(main.run_command(sys.argv[1:]), last=lambda code: _tell_exit(conn, code))
        except BaseException:  # noqa: BLE001 - whatever happens, this child must not return to the loop
            import traceback

            traceback.print_exc()
        finally:
            os._exit(1)  # only when the command could not exit by itself


def _tell_exit(conn: socket.socket, code: int) -> None:
    """The served command's last act: its status to its caller (which then closes its end,
    whereupon the warm driver interrupts what is left of the command: nothing, so this
    process ignores that)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _send(conn, {"exit": code})
    except OSError:  # the caller is gone
        pass


def _alive(pid: int) -> bool:
    from scheduler.pool import process_alive  # not at the top: the client side stays light

    return process_alive(pid)


def _closed(conn: socket.socket) -> bool:
    """Whether the caller closed its end (it sends nothing after its request)."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _reopen_streams(streams: list[list[str]]) -> None:
    """Standard streams on the caller's descriptors, buffered as a fresh process's are
    (output line-buffered on a terminal, error always line-buffered)."""
    for fd, name, (encoding, errors) in zip((0, 1, 2), ("stdin", "stdout", "stderr"), streams):
        line_buffering = fd == 2 or (fd == 1 and os.isatty(1))
        stream = open(fd, "r" if fd == 0 else "w", encoding=encoding, errors=errors, closefd=False,  # noqa: SIM115
                      buffering=-1 if fd == 0 else (1 if line_buffering else -1))
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def spawn(directory: Path, pool_pid: int) -> Any:
    """Start a warm driver beside the warm pool whose daemon is ``pool_pid``: it serves
    the ``raypass`` commands of this environment, writes its record (and log) to
    ``directory`` and stops when that daemon is gone. Returns the ``subprocess.Popen``."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    code = (f"import sys; from raypass_cli.forkserver import main; "
            f"sys.exit(main({str(directory)!r}, {pool_pid}))")
    with open(directory / "warm_driver.log", "ab") as log:
        # `-c` puts the working directory first on the import path, the one entry not
        # compared (a command's child takes its caller's): there, the sources' root, so
        # that it imports the same raypass as its callers. Its own session: it outlives
        # `pool start`, and the terminal's signals are not for it
        return subprocess.Popen([sys.executable, "-c", code], cwd=root, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(driver: Any, directory: Path, timeout: float = 60.0) -> dict[str, Any] | None:
    """Its record once it serves; None if it ended first or took longer than ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and driver.poll() is None:
        record = read_record(directory)
        if record is not None and record.get("pid") == driver.pid:
            return record
        time.sleep(0.02)
    return None


def read_record(directory: Path | None = None) -> dict[str, Any] | None:
    """The running warm driver's record (pid, socket, commands served), if any; the record
    of one that died without removing it (killed) is removed, with its socket."""
    path = (directory or pool_dir()) / RECORD_FILE
    try:
        record = json.loads(path.read_text())
        if _alive(int(record["pid"])):
            return record
        socket_path = Path(record["socket"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for stale in (socket_path, socket_path.parent, path):
        if stale == socket_path.parent and not stale.name.startswith("raypass-driver-"):
            continue  # not a directory the warm driver made
        try:
            stale.rmdir() if stale.is_dir() else stale.unlink()
        except OSError:
            pass
    return None


def stop(directory: Path | None = None, timeout: float = _STOP_SECONDS) -> bool:
    """Stop the warm driver (the commands it started run on to their end); False: none ran."""
    record = read_record(directory)
    if record is None:
        return False
    pid = int(record["pid"])
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid):
            if time.monotonic() > deadline:
                os.killpg(pid, signal.SIGKILL)
                break
            time.sleep(0.02)
    except ProcessLookupError:
        pass
    return True


def main(directory: str, pool_pid: int) -> int:
    import gc

    preload()
    # what preloading made lives as long as this process: out of the collector's sight, a
    # child's collections do not touch (and so copy) the pages it shares with this one
    gc.freeze()
    return WarmDriver(Path(directory), pool_pid).serve()
