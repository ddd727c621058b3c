"""Dev tooling: stand-ins, benchmarks, the demo, the fuzzer and the drill's in-process target.

``devstack`` (kagent and embedding stand-ins, throwaway PostgreSQL, kagent's own server),
``bench`` (``memgov bench``), ``demo`` (``memgov demo``), ``fuzz`` (``memgov fuzz``) and
``drill_devstack`` (``memgov drill`` without URLs). None of it is part of the production wheel or
image, and the runtime never imports it (an import contract in pyproject.toml holds that); the
command line registers these commands only where this package is installed.
"""
