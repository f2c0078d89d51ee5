"""A warm pool's front door: drivers reach its actors through a socket, without Ray.

Connecting a driver to Ray costs more than a small build (``import ray`` alone takes
about a quarter of a second, connecting and disconnecting as much again), so a warm
pool's manager actor listens on a TCP socket (``multiprocessing.connection``, with the
pool's secret key) and forwards what a driver sends to its worker actors. Payloads stay
bytes on the way: the gateway never unpickles a driver's passes or functions, so it
needs none of the driver's code.

One connection is one driver. Every run it begins is ended when the driver says so or
when the connection drops (the driver exited or was killed mid-run): the workers then
forget that run's functions, and nothing of it stays behind.

Messages are tuples. Driver to gateway: ``(request_id, kind, *args)``; the gateway
answers a request with ``("reply", request_id, value)`` or ``("error", request_id,
text)``, and a finished batch call with ``("done", token, result)``: the result's
bytes, None (lost with its actor) or the text of an error that kept it from running.
``submit`` and ``drop`` have no reply, so a stage's calls stream out without waiting.
A worker that comes up after the pool began serving (a private pool serves from its
first worker on) is announced to every driver as ``("ready", slot, view)``.
"""

from __future__ import annotations

import itertools
import pickle
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from scheduler.pool.transport import SlotView, Transport
from workers.actor import BatchResult, StageSpec
from workers.calls import Call
from workers.wire import Packed, dumps

Endpoint = tuple[str, int]


class GatewayError(RuntimeError):
    """The pool's gateway refused a request or went away mid-run."""


# ----- the driver's side -------------------------------------------------------------------
class GatewayTransport(Transport):
    """One run on a warm pool, through its gateway (see the module docstring)."""

    def __init__(self, endpoint: Endpoint, authkey: bytes, workers: int | None = None) -> None:
        try:
            self._conn = Client(endpoint, authkey=authkey)
        except (OSError, EOFError) as error:  # a record whose gateway is gone
            raise GatewayError(f"no warm pool answers at {endpoint[0]}:{endpoint[1]}: {error}") from error
        self._ids = itertools.count()
        self._done: deque[tuple[int, bytes | None]] = deque()
        self._joined: list[int] = []  # slots announced ready since the runner last asked
        self._announced: dict[int, SlotView] = {}  # announced before the run's slots were known
        self.endpoint = endpoint
        self.slots: list[SlotView] = []
        self.run_id, slots = self._request("begin", workers)
        self._begin([SlotView(*slot) for slot in slots])
        self.description = f"warm pool at {endpoint[0]}:{endpoint[1]}"

    def _send(self, kind: str, *args: Any) -> int:
        request_id = next(self._ids)
        try:
            self._conn.send((request_id, kind, *args))
        except OSError as error:
            raise GatewayError(f"the warm pool's gateway went away: {error}") from error
        return request_id

    def _receive(self) -> tuple[Any, ...]:
        try:
            return self._conn.recv()
        except (EOFError, OSError) as error:
            reason = error or "connection closed"
            raise GatewayError(f"the warm pool's gateway went away: {reason}") from error

    def _begin(self, slots: list[SlotView]) -> None:
        """The run's slots, as "begin" answered, with the workers announced while it
        was answered (after its snapshot) up."""
        self.slots = slots
        for index, view in self._announced.items():
            if index < len(self.slots):
                self.slots[index] = view
        self._announced.clear()

    def _take(self, message: tuple[Any, ...]) -> bool:
        """Keep a message that answers no request (a finished call, a worker come up);
        False: it is a request's answer."""
        if message[0] == "done":
            self._done.append((message[1], message[2]))
            return True
        if message[0] == "ready":
            index, view = message[1], SlotView(*message[2])
            if not self.slots:
                self._announced[index] = view
            elif index < len(self.slots):
                if not self.is_ready(index):
                    self._joined.append(index)
                self.slots[index] = view
            return True
        return False

    def _request(self, kind: str, *args: Any) -> Any:
        request_id = self._send(kind, *args)
        while True:
            message = self._receive()
            if self._take(message):
                continue
            if message[1] == request_id:
                if message[0] == "error":
                    raise GatewayError(f"the warm pool refused {kind!r}: {message[2]}")
                return message[2]

    def put_stage(self, spec: StageSpec) -> Any:
        return self._request("stage", dumps(spec))

    def submit(self, call: Call, stage: Any) -> Any:
        request = pickle.dumps((call.names, call.load, call.drop), protocol=5)
        return self._send("submit", call.slot, stage, request)  # its request id is its token

    def next_done(self, tokens: list[Any]) -> tuple[Any, BatchResult | None]:
        wanted = set(tokens)
        while True:
            for i, (token, payload) in enumerate(self._done):
                if token in wanted:
                    del self._done[i]
                    if isinstance(payload, str):  # the gateway could not run the call
                        raise GatewayError(f"the warm pool could not run a call: {payload}")
                    return token, (pickle.loads(payload) if payload is not None else None)
            self._take(self._receive())

    def joined(self) -> list[int]:
        joined, self._joined = self._joined, []
        return joined

    def restart(self, index: int, generation: int) -> SlotView:
        self.slots[index] = SlotView(*self._request("restart", index, generation))
        return self.slots[index]

    def load(self, index: int, packed: Packed) -> None:
        self._request("load", index, pickle.dumps(packed, protocol=5))

    def drop(self, index: int, names: list[str]) -> None:
        self._send("drop", index, names)

    def refresh(self) -> list[SlotView]:
        current = [SlotView(*slot) for slot in self._request("slots")][: len(self.slots)]
        self._joined += [view.index for view in current
                         if view.info.get("ready", True) and not self.is_ready(view.index)]
        self.slots = current
        return self.slots

    def close(self) -> None:
        try:
            self._request("end")
        except GatewayError:
            pass  # the pool is gone: so is the run
        finally:
            self._conn.close()


# ----- the pool's side -----------------------------------------------------------------------
class GatewayServer:
    """Serves drivers on ``host`` (a free port) for the worker slots of ``pool`` (a
    ``scheduler.pool.slots.WorkerPool`` of the pool's daemon). ``on_activity`` is called on
    every request and ``on_run`` when a run begins or ends (the daemon's idle clock and
    counters); ``status`` answers a status request and ``stop`` a stop request."""

    def __init__(
        self,
        pool: Any,
        host: str,
        on_activity: Callable[[], None],
        on_run: Callable[[str, bool], None],
        status: Callable[[], dict[str, Any]],
        stop: Callable[[], None],
    ) -> None:
        self.pool = pool
        self.authkey = secrets.token_bytes(32)
        self._listener = Listener((host, 0), authkey=self.authkey)
        self.endpoint: Endpoint = self._listener.address
        self._on_activity = on_activity
        self._on_run = on_run
        self._status = status
        self._stop = stop
        self._restart_lock = threading.Lock()
        self._closed = False
        self._announce: set[Callable[[tuple[Any, ...]], None]] = set()  # each connection's send
        self.connections = 0  # open now (drivers, and status or stop requests)
        self.drivers = 0  # connections that began a run
        threading.Thread(target=self._accept, name="raypass-gateway", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.close()
        except OSError:
            pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()
            except Exception:  # noqa: BLE001  (closed, or a client with the wrong key)
                if self._closed:
                    return
                continue
            threading.Thread(target=self._serve, args=(conn,), name="raypass-driver", daemon=True).start()

    def slot_views(self) -> list[tuple[int, int, dict[str, Any]]]:
        return [(s.index, s.generation, dict(s.info)) for s in self.pool.slots]

    def slot_ready(self, index: int) -> None:
        """Slot ``index``'s worker came up: every driver connected hears of it."""
        message = ("ready", index, self.slot_views()[index])
        for send in list(self._announce):
            send(message)

    def _serve(self, conn: Connection) -> None:
        """One driver: its runs, its stages, its calls; all ended when it goes away."""
        import ray

        self.connections += 1
        send_lock = threading.Lock()
        runs: list[str] = []
        began = False
        stages: dict[int, Any] = {}
        in_flight: dict[int, Any] = {}  # token -> the batch call's ObjectRef
        workers = len(self.pool.slots)

        def send(message: tuple[Any, ...]) -> None:
            with send_lock:
                try:
                    conn.send(message)
                except OSError:
                    pass  # the driver is gone; its connection's loop ends the run

        def forward_result(token: int, ref: Any) -> None:
            in_flight[token] = ref

            def done(future: Any) -> None:
                in_flight.pop(token, None)
                try:
                    send(("done", token, future.result()))
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError):
                    send(("done", token, None))
                except Exception as error:  # noqa: BLE001  (reported to the driver, which raises)
                    send(("done", token, f"{type(error).__name__}: {error}"))

            ref.future().add_done_callback(done)

        self._announce.add(send)
        try:
            while True:
                try:
                    request_id, kind, *args = conn.recv()
                except (EOFError, OSError):
                    return
                if kind not in ("status", "stop"):  # looking at a pool does not keep it alive
                    self._on_activity()
                try:
                    if kind == "submit":
                        slot, stage, request = args
                        actor = self.pool.slots[slot].actor
                        ref = actor.run_batch_wire.remote(runs[-1], [stages[stage]], request)
                        forward_result(request_id, ref)
                        continue
                    if kind == "drop":
                        self.pool.slots[args[0]].actor.drop.remote(runs[-1], args[1])
                        continue
                    if kind == "begin" and not began:
                        began = True
                        self.drivers += 1
                    send(("reply", request_id, self._answer(kind, args, runs, stages, workers)))
                except Exception as error:  # noqa: BLE001  (the driver raises it as a GatewayError)
                    # a submit's answer is its "done" message; a drop has none
                    answer = "done" if kind == "submit" else "error"
                    send((answer, request_id, f"{type(error).__name__}: {error}"))
        finally:
            self._announce.discard(send)
            # a driver gone mid-run (killed, or it stopped on an error): its queued calls
            # are cancelled, so the workers go back to serving the drivers still here
            for ref in list(in_flight.values()):
                try:
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001  (finished meanwhile)
                    pass
            for run_id in runs:
                self._end_run(run_id)
            self.connections -= 1
            if began:
                self.drivers -= 1
            conn.close()

    def _answer(
        self, kind: str, args: list[Any], runs: list[str], stages: dict[int, Any], workers: int
    ) -> Any:
        import ray

        if kind == "begin":
            run_id = f"pool-{secrets.token_hex(6)}"
            if runs:  # one run at a time per connection: the previous one is over
                self._end_run(runs.pop())
            runs.append(run_id)
            self._on_run(run_id, True)
            wanted = args[0] or workers
            return run_id, self.slot_views()[: min(wanted, workers)]
        if kind == "stage":
            key = len(stages)
            stages[key] = ray.put(args[0])
            return key
        if kind == "restart":
            index, generation = args
            with self._restart_lock:  # two drivers seeing one death restart it once
                if self.pool.slots[index].generation == generation:
                    self.pool.restart(index)
            return self.slot_views()[index]
        if kind == "load":
            index, packed = args
            ray.get(self.pool.slots[index].actor.load_wire.remote(runs[-1], packed))
            return None
        if kind == "slots":
            return self.slot_views()
        if kind == "status":
            return self._status()
        if kind == "stop":
            self._stop()
            return None
        if kind == "end":
            if runs:
                self._end_run(runs.pop())
            stages.clear()
            return None
        raise GatewayError(f"unknown request {kind!r}")

    def _end_run(self, run_id: str) -> None:
        import ray

        refs = [slot.actor.end_run.remote(run_id) for slot in self.pool.slots]
        try:
            ray.wait(refs, num_returns=len(refs), timeout=10.0)
        except Exception:  # noqa: BLE001  (a dead worker holds nothing of the run)
            pass
        self._on_run(run_id, False)


def query(endpoint: Endpoint, authkey: bytes, kind: str) -> Any:
    """One request that belongs to no run (``status``, ``stop``), on its own connection."""
    try:
        conn = Client(endpoint, authkey=authkey)
    except (OSError, EOFError) as error:
        raise GatewayError(f"no warm pool answers at {endpoint[0]}:{endpoint[1]}: {error}") from error
    try:
        conn.send((0, kind))
        while True:
            answer, _, value = conn.recv()
            if answer == "reply":
                return value
            if answer == "error":
                raise GatewayError(f"the warm pool refused {kind!r}: {value}")
    except (EOFError, OSError) as error:
        raise GatewayError(f"the warm pool went away during {kind!r}") from error
    finally:
        conn.close()


def wait_for_port(endpoint: Endpoint, timeout: float) -> bool:
    """Whether something accepts connections at ``endpoint`` within ``timeout`` seconds."""
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(endpoint, timeout=min(1.0, timeout)):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


__all__ = ["GatewayError", "GatewayServer", "GatewayTransport", "query", "wait_for_port"]
