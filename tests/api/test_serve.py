"""The API runner's listening socket has TCP_NODELAY, and so do the connections it accepts (Linux inherits it):
without it, uvicorn's own multi-worker socket adds the client's 40 ms delayed ACK to every kept-alive response."""

from __future__ import annotations

import socket

import uvicorn

from training_platform.api.serve import bind_socket


def test_listening_and_accepted_sockets_have_tcp_nodelay():
    config = uvicorn.Config("training_platform.api.app:app", host="127.0.0.1", port=0)
    server = bind_socket(config)
    try:
        assert server.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        server.listen()
        with socket.create_connection(server.getsockname()[:2], timeout=5):
            conn, _ = server.accept()
            with conn:
                assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        server.close()
