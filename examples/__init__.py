"""Small runnable programs a user copies from; each has a `main(base_url)` the tests run against the local server."""
