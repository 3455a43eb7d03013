"""Shoal: a multi-tenant event streaming platform that speaks the Apache Kafka wire protocol."""

# The release, in one place (semantic versioning): pyproject.toml reads it ([tool.setuptools.dynamic]),
# and `shoal --version`, the start-up banner, ApiVersions' client software version of Shoal's own
# connections and /metrics' shoal_build_info show it. CHANGELOG.md has one entry per release.
__version__ = "0.16.0"
