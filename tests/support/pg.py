"""The throwaway PostgreSQL server lives in the package (benchmarks use it too)."""

from sidecar.dev.devstack.pg import PgServer, free_port, start_pg

__all__ = ["PgServer", "free_port", "start_pg"]
