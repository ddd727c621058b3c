"""Benchmarks: ``memgov bench proxy`` (gateway overhead), ``state`` and ``decisions``."""
