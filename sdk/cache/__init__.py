"""The cache step of a call: how kvwise aims at the provider's prompt cache (what that cache does, its
minimum lengths, breakpoints and lifetimes, lives in `sdk.providers`).

fingerprint     the prefix hash chain, where it broke and why (`PrefixTracker`)
hints           `place_cache_hints`: Anthropic breakpoints, OpenAI cache keys
expected_reads  `SentPrefixes`: the tokens the provider should read from its cache, and why it read less
diagnostics     Anthropic's server-side cache-miss diagnosis, compared with kvwise's
fanout          `FanOut`: concurrent calls of one cacheable prefix wait for the first to write the cache
"""
