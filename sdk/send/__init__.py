"""The send step of a call: its attempts and, for a stream, the watching of what comes back.

    sender        `Sender`: one call's send through the live client's `post`, its steps written
                  once (`Sender._sending`)
    drive         `Io`, `run`, `arun`: the sync and the async driver of steps that do no I/O
    attempts      `Attempts`: every attempt, the first too, under tenacity with the client's rules
    stream_watch  `StreamWatch`: what a stream's events mean (content, cut, truncation), and the
                  watching loops that read the client's stream through it
    stream_proxy  the caller's stream: the client's own stream object behind a proxy that ends the
                  call's telemetry once

The stream modules load on a process's first stream, never for a plain call.
"""

from sdk.send.sender import Sender, Server

__all__ = ["Sender", "Server"]
