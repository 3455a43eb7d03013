"""Log lines a client can cause, rate-limited so that no client can flood the broker's log.

``RateLimitedLog.log(level, key, msg, *args)`` writes at most one line per ``key`` per
``interval_s``; the lines it holds back are counted and the next line written for that key says
"(N more since HH:MM:SS)". A traceback (``exc_info``) therefore appears at most once per key per
interval. Memory is bounded: at most ``max_keys`` keys are remembered (the least recently logged
is forgotten first), and at most ``max_lines`` lines are written per interval over all keys, so
a client that varies the key (many addresses, many APIs) still cannot flood the log; lines held
back by that global cap are counted and reported by the next line that gets through.

Time comes from an injected ``Clock`` (its monotonic reading), so tests drive it by hand.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any, Hashable

from shoal.clock import SYSTEM_CLOCK, Clock


class RateLimitedLog:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_s: float = 10.0,
        max_keys: int = 1024,
        max_lines: int = 100,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.max_keys = max_keys
        self.max_lines = max_lines
        self.clock = clock
        # key -> [monotonic time of its last line, lines held back since, wall time of that line]
        self._keys: OrderedDict[Hashable, list[Any]] = OrderedDict()
        self._window_start = float("-inf")
        self._window_lines = 0
        self._capped = 0  # lines held back by max_lines in this or earlier windows, not yet reported
        self.suppressed_total = 0  # every line ever held back (a counter for tests and metrics)

    def log(self, level: int, key: Hashable, msg: str, *args: Any, exc_info: Any = None) -> bool:
        """Log ``msg % args`` unless ``key`` logged less than ``interval_s`` ago; True if written."""
        if not self.logger.isEnabledFor(level):
            return False
        now = self.clock.monotonic()
        entry = self._keys.get(key)
        if entry is not None and now - entry[0] < self.interval_s:
            entry[1] += 1
            self.suppressed_total += 1
            return False
        if now - self._window_start >= self.interval_s:
            self._window_start = now
            self._window_lines = 0
        if self._window_lines >= self.max_lines:
            self._capped += 1
            self.suppressed_total += 1
            return False
        self._window_lines += 1
        notes = []
        if entry is not None and entry[1]:
            notes.append(f"{entry[1]} more since {time.strftime('%H:%M:%S', time.localtime(entry[2]))}")
        if self._capped:
            notes.append(f"{self._capped} other lines held back by the log rate limit")
            self._capped = 0
        if notes:
            msg = f"{msg} ({'; '.join(notes)})"
        if entry is None:
            entry = self._keys[key] = [now, 0, 0.0]
            if len(self._keys) > self.max_keys:
                self._keys.popitem(last=False)
        else:
            self._keys.move_to_end(key)
        entry[0], entry[1], entry[2] = now, 0, self.clock.now_ms() / 1000.0
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def warning(self, key: Hashable, msg: str, *args: Any) -> bool:
        return self.log(logging.WARNING, key, msg, *args)

    def exception(self, key: Hashable, msg: str, *args: Any) -> bool:
        """``logger.exception`` (ERROR with the traceback), rate-limited by ``key``."""
        return self.log(logging.ERROR, key, msg, *args, exc_info=True)
