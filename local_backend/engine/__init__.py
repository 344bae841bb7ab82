"""The engine: its front and stepping core, the scheduler and KV block bookkeeping, requests and their outputs."""
