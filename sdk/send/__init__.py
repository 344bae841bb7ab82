"""The send step of a call: its attempts and, for a stream, the watching of what comes back.

    sender        `Sender`: one call's send through the live client's `post`, sync or async
    stream_watch  `StreamWatch`: what a stream's events mean (content, cut, truncation), and the
                  watching loops that read the client's stream through it
    stream_proxy  the caller's stream: the client's own stream object behind a proxy that ends the
                  call's telemetry once

A plain call loads `sender` alone; the stream modules load on a process's first stream.
"""

from sdk.send.sender import Sender, Server

__all__ = ["Sender", "Server"]
