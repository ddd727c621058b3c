"""``memgov drill``: the ADR acceptance proof against a deployment or the devstack (SPEC R-16).

``target`` (what to run against and the keys to act with) → ``actors`` (the bridge, subjects,
operator and agent runtime the drill plays) → ``checks_*`` (one coroutine per acceptance
property) → ``runner`` (order, outcomes, cleanup) → ``bundle`` (``drill.json`` + ``SUMMARY.md``).
``wire`` records every answer for ``sentinels``; ``devstack`` is the in-process target.
"""
