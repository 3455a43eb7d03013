"""Regular expressions a client sends: evaluated by RE2, in time linear in the text matched.

Two request fields carry a client's regular expression: ConsumerGroupHeartbeat's
``SubscribedTopicRegex`` (KIP-848) and ListTransactions' ``TransactionalIdPattern`` (v2,
KIP-1152). Kafka's broker compiles both with RE2/J, never ``java.util.regex``, so that no pattern
a client writes can make it backtrack: ``(a+)+b`` against ``"a" * 26`` took Python's ``re`` four
seconds on the event loop (a broker lost its etcd lease that way), and each further character
doubled it. Shoal uses Google's RE2 itself (``google-re2``), the engine RE2/J ports, so the
syntax accepted is the same as Kafka's:

- accepted: classes (``[a-z]``, ``\\d``, ``\\w``, POSIX ``[[:alpha:]]``, Unicode ``\\pL``,
  ``\\p{Lu}``), alternation, greedy and lazy repetition (counts up to 1000), groups (named with
  ``(?P<n>...)`` or ``(?<n>...)``), flags (``(?i)``, ``(?s)``), ``\\A``, ``\\z``, ``\\Q...\\E``;
- refused, as RE2/J refuses them: backreferences (``\\1``), lookaround (``(?=``, ``(?<!``),
  possessive quantifiers (``a*+``), atomic groups, ``\\Z``, ``\\h``, Java's ``\\p{IsAlphabetic}``
  forms, and a program larger than RE2's memory budget (``a{1000}`` nested in another count).

Matching is linear in the text (a topic name is at most 249 characters, a transactional id is
short), but its constant grows with the compiled program, so a pattern is also bounded:
at most :data:`MAX_PATTERN_CHARS` characters (Kafka has no such bound; a production platform
does not want one tenant's megabyte of alternation evaluated against every topic), and RE2's
default memory budget (8 MiB, which leaves its DFA room: a smaller budget starves it and RE2
falls back to its slower NFA). A pattern of that length against a 249-character name costs at
worst tens of milliseconds, so callers that match many names do it off the event loop
(:func:`match_names` in a worker thread: RE2 releases the GIL while it matches).

A refused pattern raises :class:`InvalidRegex`; the handlers answer INVALID_REGULAR_EXPRESSION,
as Kafka does. RE2's own error log line is switched off (a client's bad pattern is the client's
error, answered on the wire, and logs nothing on the broker).

Pure: no I/O; thread-safe (a compiled RE2 may be shared between threads).
"""

from __future__ import annotations

from collections.abc import Iterable

import re2

MAX_PATTERN_CHARS = 1000
"""The longest regular expression a client may send (characters)."""

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the client hears of its bad pattern; the broker's log does not


class InvalidRegex(ValueError):
    """A client's pattern that RE2/J would refuse, or one longer than :data:`MAX_PATTERN_CHARS`."""


def compile_client_regex(pattern: str):
    """Compile a client's pattern for full matches (Java's ``Matcher.matches``); raises
    :class:`InvalidRegex` with RE2's reason."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidRegex(f"longer than {MAX_PATTERN_CHARS} characters ({len(pattern)})")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        reason = e.args[0] if e.args else e
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidRegex(str(reason)) from None


def match_names(regex, names: Iterable[str], skip: int = 0) -> frozenset[str]:
    """The ``names`` whose text after the first ``skip`` characters ``regex`` fully matches
    (``skip`` drops a tenant's prefix). Safe to run in a worker thread."""
    return frozenset(name for name in names if regex.fullmatch(name[skip:]) is not None)
