"""``memgov fuzz``: property-based and schema-driven fuzzing of the gateway against its contracts (dev tooling)."""
