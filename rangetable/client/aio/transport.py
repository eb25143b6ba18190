"""The asyncio client's transport: one ``zmq.asyncio`` DEALER socket, any number of requests in flight.

Many tasks share one socket: each request gets an id of its own (a counter, never reused on the
socket) and a future; one reader task receives the replies and resolves the future of each id.
A reply whose id is no longer waited for (its request timed out, or its task was cancelled) is
dropped, so it can never be taken for another request's answer, and the socket stays in use:
a timeout or a cancellation costs the other requests nothing. A second task watches the socket's
monitor: when the connection drops (a frontend killed), every request waiting on it fails at once
with the retriable ``OperationTimedOut``, as in the blocking transport. What a request and a reply look like,
the ``hello`` check, the errors and the CURVE keys are those of the blocking transport
(:class:`rangetable.client.transport.Connection`); retries are :func:`call_with_retry` here, with the
policy's decisions of :func:`rangetable.client.retry.next_pause`.

A transport belongs to the event loop of its first request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import zmq
import zmq.asyncio

from rangetable import protocol
from rangetable.client.retry import NoRetry, RetryPolicy, next_pause
from rangetable.client.transport import HELLO, Connection
from rangetable.errors import TableError

if TYPE_CHECKING:
    from rangetable.messages import NativeRequest

T = TypeVar("T")


class _Dropped(Exception):
    """Set on the futures of the requests waiting when the connection dropped."""


class AsyncTransport(Connection):
    """A DEALER connection to a frontend's native endpoint, shared by any number of tasks."""

    def __init__(self, endpoint: str, timeout: float = 30.0) -> None:
        super().__init__(endpoint, timeout, zmq.asyncio.Context.instance())
        self._waiting: dict[bytes, asyncio.Future[bytes]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._hello = asyncio.Lock()

    async def request(self, body: NativeRequest, timeout: float | None = None) -> Any:
        """Send one request and return its result.

        Raises the reply's error as a TableError (404/409/412 as the azure-core-named subclasses) or
        ``OperationTimedOut`` when no reply arrives within ``timeout`` (default: the transport's).
        """
        if self.server_info is None:
            async with self._hello:
                if self.server_info is None:
                    self._accept_hello(await self._roundtrip(HELLO, timeout))
        return await self._roundtrip(body, timeout)

    async def _roundtrip(self, body: NativeRequest, timeout: float | None) -> Any:
        data = self._encode(body)
        limit = self.timeout if timeout is None else timeout
        sock = cast("zmq.asyncio.Socket", self._socket())
        loop = asyncio.get_running_loop()
        if self._reader is None:
            self._reader = loop.create_task(self._read(sock))
            monitor = cast("zmq.asyncio.Socket", self._monitor)
            self._watcher = loop.create_task(self._watch(monitor))
        request_id = self._request_id()
        answer: asyncio.Future[bytes] = loop.create_future()
        self._waiting[request_id] = answer
        t0 = loop.time()
        try:
            async with asyncio.timeout(limit):
                await self._send(sock, [request_id, data])
                reply = await answer
        except _Dropped:
            raise self._lost(body, loop.time() - t0) from None
        except TimeoutError:
            error = self._unanswered(body, limit)
            if error.error_code == "AuthenticationFailed":
                await self._stop_reading()
                self._reset()  # a new key may be registered by the next request: connect afresh
            raise error from None
        finally:
            self._waiting.pop(request_id, None)
        return self._decode(reply)

    async def _send(self, sock: zmq.asyncio.Socket, frames: list[bytes]) -> None:
        """Send a request: at once when the socket takes it (the fast send of :mod:`rangetable.protocol`),
        else through ``zmq.asyncio`` once it can. A send may consume the edge of the socket's
        edge-triggered descriptor that would have woken the reader, so replies already queued are
        taken here."""
        try:
            protocol.send_frames(sock, frames, protocol.NOBLOCK)
        except zmq.Again:
            await sock.send_multipart(frames)
            return
        if protocol.readable(sock):
            self._deliver(sock, protocol.recv_frames(sock, protocol.NOBLOCK))

    async def _read(self, sock: zmq.asyncio.Socket) -> None:
        """Receive replies until cancelled: wait for one, then take every one already queued."""
        while True:
            self._deliver(sock, await sock.recv_multipart())

    async def _watch(self, monitor: zmq.asyncio.Socket) -> None:
        """Take the monitor's events until cancelled; a dropped connection fails every waiting request."""
        while True:
            if self._note(await monitor.recv_multipart()):
                for answer in self._waiting.values():
                    if not answer.done():
                        answer.set_exception(_Dropped())

    def _deliver(self, sock: zmq.Socket, frames: list[bytes]) -> None:
        """Resolve the future of each reply: ``frames`` and every one queued behind it."""
        while True:
            if len(frames) == 2:
                answer = self._waiting.get(frames[0])
                if answer is not None and not answer.done():
                    answer.set_result(frames[1])
            try:
                frames = protocol.recv_frames(sock, protocol.NOBLOCK)
            except zmq.Again:
                return

    async def _stop_reading(self) -> None:
        tasks = [t for t in (self._reader, self._watcher) if t is not None]
        self._reader = self._watcher = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Close the socket; requests still waiting and later ones raise ValueError."""
        self._closed = True
        await self._stop_reading()
        self._reset()
        for answer in self._waiting.values():
            if not answer.done():
                answer.set_exception(ValueError("the client is closed"))


async def call_with_retry(call: Callable[[], Awaitable[T]], policy: RetryPolicy | None, *,
                          sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> T:
    """Await ``call()``, retrying retriable :class:`TableError` s as ``policy`` allows (the asyncio
    :func:`rangetable.client.retry.call_with_retry`, with the same decisions)."""
    delays = (policy or NoRetry()).delays()
    while True:
        try:
            return await call()
        except TableError as exc:
            pause = next_pause(exc, delays)
            if pause is None:
                raise
        await sleep(pause)
