"""Operator-facing admin services (the HTTP admin API)."""
