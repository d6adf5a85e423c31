"""What the tests' HTTP clients and servers share."""

from __future__ import annotations

import socket

# The Host a browser on this machine sends. A server bound to loopback answers only requests addressed to a
# loopback name (DNS rebinding, web/origin.py), and Starlette's TestClient would otherwise send "testserver".
LOOPBACK = "http://127.0.0.1:7860"


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at `host` now, for a server a test starts (another process may take it in the
    meantime; on loopback in a test run that does not happen in practice)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
