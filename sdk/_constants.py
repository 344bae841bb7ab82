"""Tunables of the SDK, in one place."""

from __future__ import annotations

# Loop guard
LOOP_MIN_REPEATS = 3  # back-to-back copies of a prose period before the guard trips ("cut within 3 periods")
LOOP_MIN_SPAN_CHARS = 480  # span a period without letters ("====", "0, ") must reach; divided by its distinct letters
LOOP_DIVERSE_UNIT_LETTERS = 8  # distinct letters from which a period counts as prose-like (the divisor's cap)
LOOP_MAX_PERIOD_CHARS = 256  # longest period looked for (a short paragraph)
LOOP_WINDOW_CHARS = 1024  # recent text kept; at least max(MIN_REPEATS * MAX_PERIOD_CHARS, MIN_SPAN_CHARS)
LOOP_PROBE_CHARS = 16  # length of the recent suffix searched for to find candidate periods
LOOP_CHECK_EVERY_CHARS = 16  # new characters needed before the next check
LOOP_MAX_CANDIDATES = 12  # candidate periods verified per check, nearest first (bounds the worst case)
LOOP_STRUCTURED_MIN_REPEATS = 64  # copies of a record-like period (rows, log lines, JSON records) before it trips ...
LOOP_STRUCTURED_MIN_SPAN_CHARS = 4096  # ... and the span they must reach: a legitimate list of repeats passes

# Volatile content
VOLATILE_MIN_HEX_CHARS = 16  # a hex run this long (with digits and letters) is a nonce
VOLATILE_MIN_BASE64_CHARS = 20  # a base64/base64url run this long (mixed case and digits) is a nonce
VOLATILE_MAX_WORD_SHARE = 0.5  # a nonce has less of its length in words ("Range", "EXAMPLE"); identifiers have more
VOLATILE_IDENTIFIER_PARTS = 3  # a token split by "_"/"-" into this many parts or more ...
VOLATILE_IDENTIFIER_PART_CHARS = 7  # ... with parts this short on average is an identifier ("_OP_NO_SSLv2_OR_SSLv3")
VOLATILE_MIN_DISTINCT_CHARS = 6  # a nonce has this many distinct characters ("0x7fffffffffffffff" is a constant)
VOLATILE_SCAN_CACHE_SIZE = 256  # texts whose scan is remembered: a stable system prompt is scanned once
VOLATILE_LINE_CACHE_SIZE = 4096  # lines whose scan is remembered: a prompt with one new line rescans that line
VOLATILE_FAMILIES = 256  # prompt families whose candidate bytes a wrapped client remembers (LRU)
FAMILY_ID_HEX_CHARS = 16  # a prompt family's id on the span: its outline hash, this many hex characters
VOLATILE_LINES_TAUGHT_SHARE = 0.5  # a call whose lines differ from its family's last call's in more than this share
VOLATILE_LINES_TAUGHT_MIN = 2  # and more than this many lines is another prompt of the same outline: it teaches nothing
VOLATILE_MAX_ASCENDING_RUN = 4  # a nonce has no longer run of consecutive code points ("0123456789abcdef")

# Expected against read (`sdk.cache.expected_reads`)
SENT_PREFIXES_REMEMBERED = (
    64  # calls whose prefixes (hashes and sizes) a wrapped client keeps, to tell what the next should read
)
CACHE_MISS_TOLERANCE_SHARE = (
    0.1  # a read this much under the expectation is no miss (the expectation's tokens are estimated)
)
CACHE_UNDER_MINIMUM_MARGIN = (
    0.1  # a shared prefix this close above the minimum may fall under it by the provider's count
)

# Decode limits
REASONING_ROOM_TOKENS = (
    16_000  # added to the cap where Anthropic requires max_tokens and adaptive thinking sets no budget
)
CONTEXT_FIT_BYTES_PER_TOKEN = (
    2  # prompt tokens are estimated high (English runs ~4 bytes a token): a filled cap must fit
)
ADAPTIVE_CAP_QUANTILE = 0.99  # the quantile of a workload's output lengths its adaptive cap is set from
ADAPTIVE_CAP_WINDOW = 512  # recent answers per workload the quantile is taken over (a sliding window)
ADAPTIVE_CAP_MIN_CALLS = 50  # answers a workload needs before it gets an adaptive cap
ADAPTIVE_CAP_WORKLOADS = 256  # workloads (API, model, stable prefix) a wrapped client keeps output lengths for (LRU)
ADAPTIVE_CAP_MAX_CUT_SHARE = 0.05  # share of the window cut at the adaptive cap past which the workload starts over

# Report (`kvwise report`)
REPORT_TOP_CONVERSATIONS = 10  # conversations in the report's table, by spend
REPORT_BREAK_LABELS = 20  # cache breaks whose cause the hit-ratio figure writes out (all are marked)

# Shared state (`sdk.memory.redis_store`: Redis or Valkey)
STATE_URL_ENV = "KVWISE_STATE_URL"  # where the memories live when `sdk.wrap(state=...)` is not given
STATE_TIMEOUT_SECONDS = 0.02  # the most one store command may take before the call goes on without it
STATE_RETRY_SECONDS = 1.0  # after a failed command, the store is left alone this long (each call would wait otherwise)
STATE_EXPIRY_SECONDS = 7 * 24 * 3600  # a memory nobody touched for this long is dropped by the store
STATE_MAX_VALUE_BYTES = 1 << 20  # a stored value longer than this is malformed (a real one is hashes: kilobytes)
STATE_MAX_OUTPUT_TOKENS = 1 << 24  # a remembered output length above this is malformed

# Telemetry
EXPORT_SHUTDOWN_SECONDS = (
    5.0  # the most `sdk.telemetry.setup`'s exporter holds up a shutdown (an exiting process) to flush
)
RESPONSE_CLASS_NAMES_CACHE_SIZE = 256  # (answer class, attribute) pairs whose presence on the class is remembered
INVOCATION_JSON_CACHE_SIZE = (
    256  # parameter sets (scalar values only) whose llm.invocation_parameters JSON is remembered
)

# Embedded state (`sdk.memory.sqlite_store`: the default, one SQLite file per user and machine)
STATE_MEMORY = "memory"  # `state=` / $KVWISE_STATE_URL that keeps the memories in the process
STATE_CACHE_ENV = "XDG_CACHE_HOME"  # the user's cache directory; else ~/.cache
STATE_SQLITE_FILE = "kvwise/state.sqlite3"  # the default file, under the user's cache directory
STATE_SQLITE_SCHEMA = 1  # the file's layout (PRAGMA user_version): a file of a newer layout is left alone
STATE_SQLITE_BUSY_SECONDS = 1.0  # the most a call waits on another process's write before it goes on without the file
STATE_SQLITE_OPEN_FILES = 8  # files a process keeps open at once (`state=` URLs); the least recently used is closed
STATE_SQLITE_OPEN_SECONDS = 5.0  # the same wait when the file is opened: its creation syncs the disk several times
STATE_SQLITE_RETRY_SECONDS = 30.0  # after the file failed, it is left alone this long (in-process state meanwhile)
STATE_SQLITE_MAX_BYTES = 64 << 20  # a larger file is not opened, and the file is never grown past it
STATE_SQLITE_MAX_RECORDS = 4096  # records of each kind (families, calls) kept; least recently used dropped first
STATE_SQLITE_MAX_WORKLOADS = 1024  # workloads whose answer windows are kept; least recently used dropped first
STATE_SQLITE_EVICT_EVERY = 256  # writes of one process between two evictions (and one when the file is opened)
STATE_LOCAL_VALUES = (
    1024  # values (`Store.update_value`) a store in the process keeps; least recently used dropped first
)
STATE_SQLITE_CACHED = 1024  # records a process keeps as read from the file while no other process writes it
STATE_SQLITE_TOUCH_SECONDS = 3600.0  # a record read but unchanged has its last use rewritten at most this often
