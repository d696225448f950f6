# SPDX-License-Identifier: MIT
"""uvicorn's HTTP/1.1 protocol (h11) with a deadline for a request's head (issue #25 item 5).

uvicorn closes an idle keep-alive connection, but a connection that sends its request line and headers one byte at
a time is never closed: two hundred of them, unauthenticated, hold two hundred sockets for ever. Here each
connection must deliver a complete request head within ``header_timeout`` seconds of opening (or of the previous
response); otherwise it gets ``408`` and is closed. The head's size stays bounded by h11
(``h11_max_incomplete_event_size``); the body's deadline is the upload's own (``storage.receive_upload``).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["with_header_timeout"]

_TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                     b"connection: close\r\ncontent-length: 38\r\n\r\nrequest headers not received in time\r\n")


class _HeaderDeadline(H11Protocol):
    header_timeout: float = 10.0

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._head_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _too_slow(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():  # still no complete head
            self.transport.write(_TIMEOUT_RESPONSE)
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is complete: the request's own limits apply
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()  # a kept-alive connection has as long for its next head

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)


def with_header_timeout(seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol class whose connections must send a complete request head within ``seconds``
    (pass it as ``uvicorn.run(..., http=...)``)."""
    return type("H11WithHeaderTimeout", (_HeaderDeadline,), {"header_timeout": float(seconds)})
