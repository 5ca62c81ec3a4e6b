"""When to ask an OpenAI-compatible endpoint again, and after how long.

These are the ``openai`` client's own rules (openai/_base_client.py: ``_should_retry``,
``_calculate_retry_timeout``, ``_parse_retry_after_header``; openai/_constants.py), applied by
kernelpilot instead of inside the client so that every attempt can be cut short by the search's
deadline and reported while it runs. Retried: 408, 409, 429 and every 5xx, unless the server
says ``x-should-retry: false`` (``true`` retries anything) or asks for a ``retry-after`` longer
than two minutes. The wait is the server's ``retry-after-ms`` / ``retry-after`` (seconds or an
HTTP date) when it is between 0 and two minutes, else 0.5 s doubling per retry up to 8 s, minus
up to 25% jitter.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping

FIRST_DELAY_S = 0.5  # the openai client's INITIAL_RETRY_DELAY
MAX_DELAY_S = 8.0  # MAX_RETRY_DELAY
MAX_RETRY_AFTER_S = 120.0  # MAX_RETRY_AFTER_DELAY: a server asking for longer is not retried
RETRIED_STATUSES = (408, 409, 429)  # and every 5xx


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait the server asks for, in seconds, or None when it asks for none we can read."""
    for name, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            delay = float(value)
        except ValueError:
            continue
        if math.isinf(delay) and value.strip().lower() not in ("inf", "+inf", "infinity"):
            return MAX_RETRY_AFTER_S + 1  # an overflowing number: too long, not malformed
        return delay / divisor
    date = headers.get("retry-after")
    try:
        parsed = email.utils.parsedate_tz(date) if date else None
        return None if parsed is None else float(email.utils.mktime_tz(parsed) - time.time())
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def retryable(status: int, headers: Mapping[str, str]) -> bool:
    """Whether an error status is worth another attempt."""
    asked = retry_after(headers)
    if asked is not None and math.isfinite(asked) and asked > MAX_RETRY_AFTER_S:
        return False
    said = headers.get("x-should-retry")
    if said in ("true", "false"):
        return said == "true"
    return status in RETRIED_STATUSES or status >= 500


def wait_before_retry(retries_done: int, headers: Mapping[str, str] | None = None) -> float:
    """Seconds to wait before retry number ``retries_done + 1``."""
    asked = retry_after(headers) if headers is not None else None
    if asked is not None and math.isfinite(asked) and 0 < asked <= MAX_RETRY_AFTER_S:
        return asked
    backoff = min(FIRST_DELAY_S * 2 ** min(retries_done, 1000), MAX_DELAY_S)
    return backoff * (1 - 0.25 * random.random())
