"""What a handler sees of the world: the broker's services and who is asking."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shoal.broker import Broker
    from shoal.protocol.codec import RequestHeader


@dataclass
class RequestContext:
    broker: "Broker"
    header: "RequestHeader"
    client_address: str  # "host:port" of the peer
    listener: str = "PLAINTEXT"
    principal: str = "User:ANONYMOUS"
    tenant: Any = None  # set by the tenancy layer once authentication exists
    # Filled by handlers that want the connection muted / response delayed (quotas).
    throttle_ms: int = 0
    # Set by a handler (Produce with acks=0) when no response must be sent.
    no_response: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id
