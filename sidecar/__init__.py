"""memgov: a governed-memory gateway in front of kagent's controller API (import package ``sidecar``)."""

__version__ = "0.2.0"
