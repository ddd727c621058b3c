"""kagent's memory rows as memgov reaches them: the ``rest`` and ``kagent-db`` adapters (``adapters``).

This is the content store: it holds memory text, which memgov's own state store never does.
Erasure, the sweepers, the enforcement rollback and inspect all go through these adapters.
"""
