"""Clock readings: volatile-looking bytes that are the current time, so they always change.

The family memory (`sdk.families`) keeps bytes in place once they were the same on two calls of a
prompt family. A timestamp with one-second resolution is the same on two calls made within that
second, yet it is a reading of the clock, not a constant: keeping it in place on such a call moves
the prefix back and forth between calls and costs a cache miss each time. So a timestamp or an
epoch within `VOLATILE_CLOCK_WINDOW_SECONDS` of now (a day, whatever the time zone) counts as
changing on every call; a fixed date far from now ("effective 2026-01-01T00:00:00Z") is left to
the memory. Formats that do not parse are left to the memory too.
"""

from __future__ import annotations

import datetime
import email.utils
import re

from sdk._constants import VOLATILE_CLOCK_WINDOW_SECONDS
from sdk.volatile import VolatileKind, VolatileMatch

_FORMATS = ("%d/%m/%Y %H:%M", "%d/%m/%Y %H:%M:%S", "%b %d, %Y %I:%M %p", "%B %d, %Y %I:%M %p", "%a %b %d %H:%M:%S %Y")
_LABEL = re.compile(r"^[^:=]*[:=]\s*")


def is_clock_reading(match: VolatileMatch, now: float) -> bool:
    """Whether `match` reads as a time within the window of `now` (Unix seconds)."""
    if match.kind is VolatileKind.EPOCH:
        return _near(_epoch_seconds(match.text), now)
    if match.kind is VolatileKind.TIMESTAMP:
        return _near(_parsed_seconds(match.text), now)
    if match.kind is VolatileKind.LABELLED_LINE:  # "Timestamp: 2026-12-01T11:50:00Z"
        value = _LABEL.sub("", match.text.strip(), count=1)
        return _near(_parsed_seconds(value), now) or _near(_epoch_seconds(value), now)
    return False


def _near(seconds: float | None, now: float) -> bool:
    return seconds is not None and abs(seconds - now) <= VOLATILE_CLOCK_WINDOW_SECONDS


def _epoch_seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value / 1000.0 if value >= 1e12 else value


def _parsed_seconds(text: str) -> float | None:
    text = text.strip()
    stamp: datetime.datetime | None = None
    try:
        stamp = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            stamp = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            for form in _FORMATS:
                try:
                    stamp = datetime.datetime.strptime(text, form)
                    break
                except ValueError:
                    continue
    if stamp is None:
        return None
    if stamp.tzinfo is None:  # a local or unzoned time: within the window whatever the zone
        stamp = stamp.replace(tzinfo=datetime.timezone.utc)
    return stamp.timestamp()
