"""``shoal.admin.listener`` and ``shoal.metrics.listener`` values (``http://HOST:PORT``), read
without importing the admin API's server (aiohttp, pydantic): the CLI and the startup checks
parse them too."""

from __future__ import annotations

from urllib.parse import urlsplit


def parse_listener(value: str, config: str = "shoal.admin.listener") -> tuple[str, int]:
    """``http://HOST:PORT`` -> ``(host, port)``; ValueError (naming ``config``) for anything else."""
    u = urlsplit(value.strip())
    try:
        port = u.port
    except ValueError as e:
        raise ValueError(f"{config}: bad port in {value!r}") from e
    if u.scheme != "http" or not u.hostname or port is None or u.path not in ("", "/"):
        raise ValueError(f"{config} wants http://HOST:PORT, got {value!r}")
    return u.hostname, port
