"""Builds the optional C speed-ups; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("shoal._native.speedups", ["shoal/_native/speedups.c"], optional=True),
    ]
)
