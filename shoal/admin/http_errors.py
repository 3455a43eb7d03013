"""The HTTP admin API's error answer, raised by every route module (``shoal.admin.http`` and
``shoal.admin.http_namespaces``) and written by the server as ``{"error": code, "message": ...}``."""

from __future__ import annotations


class HttpError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
