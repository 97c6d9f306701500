"""A round-robin TCP proxy on loopback: the one webhook URL the API server calls, dealing its connections to several replicas.

TLS passes through (every replica serves one certificate), so the API server verifies
the replica it reaches as it would behind a Service; `reroute` changes where new
connections go (and closes the open ones: the API server keeps its connections).
"""

from __future__ import annotations

import asyncio
import threading
import time

import kit


class RoundRobin:
    """A loopback TCP proxy on its own thread: each accepted connection goes to the next backend port."""

    def __init__(self, ports: list[int]) -> None:
        self.ports, self.next = ports, 0
        self.open: set = set()  # writers of the piped connections (both ends)
        self.port = kit.free_port()
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        started.wait(10)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def pipe(reader, writer):
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        async def handle(reader, writer):
            port = self.ports[self.next % len(self.ports)]
            self.next += 1
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                writer.close()
                return
            self.open.update((writer, up_writer))
            both = asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)
            try:
                await both
            except asyncio.CancelledError:
                both.cancel()
                writer.close()
                up_writer.close()

        async def main():
            self.done = asyncio.Event()
            self.server = await asyncio.start_server(handle, "127.0.0.1", self.port)
            started.set()
            await self.done.wait()  # set by stop() once every piped connection has ended

        self.loop.run_until_complete(main())

    def reroute(self, ports: list[int]) -> None:
        """Deal new connections to `ports` only, and close the open ones (the API server keeps its connections)."""
        self.ports = ports

        async def close_all():
            for w in list(self.open):
                w.close()
            self.open.clear()

        asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(10)
        # The API server notices a closed idle connection on its own read loop, not at once: a request
        # sent in between is written on the dead one ("write: broken pipe", never retried for a POST).
        time.sleep(1.0)

    def stop(self) -> None:
        """Close the listener and every piped connection, then the loop."""

        async def shutdown():
            self.server.close()
            for w in list(self.open):
                w.close()
            pipes = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and t.get_coro().__name__ == "handle"]
            for task in pipes:
                task.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            self.done.set()

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.thread.join(5)
