"""The HTTP server of the local backend: OpenAI and Anthropic wire formats over one `Engine`."""

from local_backend.server.app import create_app
from local_backend.server.background import serve_in_thread

__all__ = ["create_app", "serve_in_thread"]
