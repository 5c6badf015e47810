"""The listening socket of ``stateflow serve``: what the connections it accepts are set to."""

from __future__ import annotations

import asyncio
import socket

from stateflow.http.server import bind


def test_accepted_connections_send_without_nagle_delay() -> None:
    # Responses go out in parts (head, body): with Nagle's algorithm on, the second part waits
    # for the client's delayed ACK, ~40 ms per request on a keep-alive connection. asyncio, which
    # uvicorn serves on, turns it off only for sockets that say they are TCP.
    async def accepted_nodelay() -> int:
        listener = bind("127.0.0.1", 0)
        port = listener.getsockname()[1]
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            value = await asyncio.wait_for(seen, 10)
            writer.close()
            return value
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(accepted_nodelay()) == 1
