"""A small keep-alive HTTPS load generator for `allot bench serve`.

Raw HTTP/1.1 over asyncio TLS streams with pre-encoded requests: it costs the
client far less per request than an HTTP client library would, so on a 2-core
machine the server, not the generator, is what saturates.
"""

from __future__ import annotations

import asyncio
import ssl
import time


class HTTPError(Exception):
    """A response that is not 200 or could not be parsed."""


def encode_post(path: str, body: bytes, host: str = "127.0.0.1") -> bytes:
    """One HTTP/1.1 POST with a JSON body, ready to write."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode("ascii") + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = None
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
            break
    if length is None:
        raise HTTPError("response without Content-Length")
    body = await reader.readexactly(length)
    return status, body


async def _worker(host: str, port: int, ctx: ssl.SSLContext, requests: list[bytes], count: int, start_at: int,
                  latencies: list[float], check: bytes | None) -> None:
    reader, writer = await asyncio.open_connection(host, port, ssl=ctx, server_hostname="localhost")
    try:
        n = len(requests)
        clock = time.perf_counter
        for i in range(count):
            t = clock()
            writer.write(requests[(start_at + i) % n])
            status, body = await _read_response(reader)
            latencies.append(clock() - t)
            if status != 200 or (check is not None and check not in body):
                raise HTTPError(f"HTTP {status}: {body[:200]!r}")
    finally:
        writer.close()


async def run_load(host: str, port: int, ctx: ssl.SSLContext, requests: list[bytes], *, total: int, concurrency: int,
                   check: bytes | None = b'"uid"') -> dict:
    """Send `total` requests over `concurrency` keep-alive connections; figures in req/s and milliseconds."""
    if total < 1 or concurrency < 1:
        raise ValueError("run_load needs at least one request and one connection")
    per = [total // concurrency + (1 if i < total % concurrency else 0) for i in range(concurrency)]
    starts = [sum(per[:i]) for i in range(concurrency)]  # disjoint runs: `total` distinct requests when given that many
    latencies: list[float] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(
        _worker(host, port, ctx, requests, per[i], starts[i], latencies, check) for i in range(concurrency)
    ))
    wall = time.perf_counter() - t0
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {"requests": total, "concurrency": concurrency, "seconds": wall, "rps": total / wall,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99)}
