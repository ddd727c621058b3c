"""Exact erasure: adapters that delete kagent memory rows and verify they are gone (SPEC D4)."""
