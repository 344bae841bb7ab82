"""The send step of a call: its attempts and, for a stream, the watching of what comes back.

    sender        `Sender`: one call's send through the live client's `post`, its steps written
                  once (`Sender._sending`)
    drive         `Io`, `run`, `arun`: the sync and the async driver of steps that do no I/O
    attempts      `sending`: the sends of one call; tenacity decides the one kvwise adds, after a
                  refusal of what kvwise added
    stream_watch  `StreamWatch`: what a stream's events mean (content, cut, truncation), and the
                  watching loops that read the client's stream through it
    stream_proxy  the caller's stream: the client's own stream object behind a proxy that ends the
                  call's telemetry once
    retry         HTTP retries are the client's own: what `Policy.retries` says to them
    refusals      `Refusals`, `TakeBack`: what kvwise added and a server refused is taken back, and
                  the context a refusal names is remembered
    stream_options  `STREAM_USAGE`: the stream usage request kvwise adds, as refusals take it back

The stream modules load on a process's first stream, never for a plain call.
"""
