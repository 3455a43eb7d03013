"""What ``shoal serve`` prints when the broker cannot start: one line, what is wrong and what to do.

``describe(error, config)`` turns the exception a failed start-up raised into that line (without
the ``shoal serve: cannot start:`` prefix the command adds). Errors that already say what to do
(a locked or unusable directory, ``shoal.storage.dirlock``; a node.id held in etcd; etcd's TLS and
RBAC files, or etcd refusing the broker's certificate, password or permissions,
``shoal.etcd.security.EtcdSecurityError``, a ValueError) are kept as they are; the others get the remedy appended here, by kind:

- the metadata file is not JSON, or not a format this Shoal reads: the directory is not Shoal's;
- the data directory was written by another node id, or belongs to another cluster;
- a listener host that does not resolve (named, with its listener), a port in use, an address
  that is not this machine's;
- any other file the broker could not use, and, last, anything unforeseen (its type and text).

``--log-level debug`` prints the traceback as well (``shoal.cli.serve``).
"""

from __future__ import annotations

import errno
import re
import socket
from typing import Any

from shoal.auth.principal import MappingError
from shoal.auth.tls import TlsConfigError
from shoal.config import ConfigError
from shoal.metadata import MetadataError
from shoal.storage.dirlock import DirLockError

_ELSEWHERE = "or point log.dirs (--log-dirs) at another directory"
_NODE = re.compile(r"written by node (-?\d+), this is node (-?\d+)")


def describe(error: BaseException, config: Any) -> str:
    """The one line for ``error``, raised while starting a broker configured by ``config``."""
    if isinstance(error, DirLockError):
        return str(error)
    if isinstance(error, MetadataError):
        return _metadata(error)
    if isinstance(error, socket.gaierror):
        return _unresolvable(error, config)
    if isinstance(error, OSError):
        return _os_error(error)
    if isinstance(error, ConfigError):
        return f"{error.message}: fix the config (server.properties, --override or the flag that sets it)"
    if isinstance(error, (TlsConfigError, MappingError, ValueError)):
        return str(error)
    return f"{type(error).__name__}: {error} (run with --log-level debug for the traceback)"


def _metadata(error: MetadataError) -> str:
    text = error.message
    if "corrupt metadata file" in text:
        return (f"{text}: this is not a Shoal metadata file, or it is damaged; point log.dirs "
                "(--log-dirs) at Shoal's data directory or an empty one (restore the file if it was Shoal's)")
    if "unsupported metadata format version" in text:
        return (f"{text}: it was written by another program or another Shoal version; "
                f"start the Shoal that wrote it, {_ELSEWHERE}")
    m = _NODE.search(text)
    if m:
        return f"{text}: start this broker with --node-id {m.group(1)} (node.id), {_ELSEWHERE}"
    if error.code == "INCONSISTENT_CLUSTER_ID":
        return f"{text}: {_ELSEWHERE.removeprefix('or ')}"
    if text.startswith("cannot write"):
        return f"{text}: make the directory writable by this user, {_ELSEWHERE}"
    return text


def _unresolvable(error: socket.gaierror, config: Any) -> str:
    why = error.strerror or str(error)
    for name, host, port in getattr(config, "listeners", []):
        if not host:
            continue
        try:
            socket.getaddrinfo(host, None)
        except socket.gaierror:
            return (f"cannot resolve the host {host!r} of listener {name}://{host}:{port}: {why}: "
                    "fix it in listeners (--listeners), e.g. 127.0.0.1, 0.0.0.0 or a name this machine resolves")
    return f"cannot resolve a listener host: {why}: check the hosts in listeners (--listeners)"


def _os_error(error: OSError) -> str:
    if error.errno == errno.EADDRINUSE:
        return (f"{error}: another process listens on that port; stop it or choose another port "
                "in listeners (--listeners; port 0 picks a free one)")
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{error}: that address is not one of this machine's; fix the host in listeners (--listeners)"
    if error.errno in (errno.EACCES, errno.EPERM) and "bind" in str(error):
        return f"{error}: ports below 1024 need privileges; choose a port of 1024 or more in listeners"
    if error.filename is not None:
        return f"cannot use {error.filename}: {error.strerror}: fix its permissions, {_ELSEWHERE}"
    return str(error)
