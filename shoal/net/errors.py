"""The errors of a request to a broker: a Kafka error code (:class:`KafkaError`, ``code_name`` is
Kafka's upper-case name, e.g. ``NOT_LEADER_OR_FOLLOWER``), or the connection gone
(:class:`ConnectionLost`, Kafka's NETWORK_EXCEPTION)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class KafkaError(Exception):
    """A Kafka error code returned for one resource (or for a whole request)."""

    def __init__(self, code_name: str, message: str | None = None, resource: str | None = None) -> None:
        self.code_name = code_name
        self.message = message
        self.resource = resource
        text = code_name
        if resource:
            text = f"{resource}: {text}"
        if message:
            text = f"{text}: {message}"
        super().__init__(text)

    @property
    def code(self) -> int:
        try:
            return int(ErrorCode[self.code_name.lower()])
        except KeyError:
            return -1

    @classmethod
    def from_code(cls, code: int, message: str | None = None, resource: str | None = None) -> "KafkaError":
        try:
            name = ErrorCode(int(code)).name.upper()
        except ValueError:
            name = f"ERROR_{int(code)}"
        return cls(name, message, resource)


class ConnectionLost(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__("NETWORK_EXCEPTION", message)


def check(code: int, message: str | None = None, resource: str | None = None) -> KafkaError | None:
    return None if int(code) == 0 else KafkaError.from_code(code, message, resource)
