"""The control API (``:8081``): consent, private inspect, exact erasure with evidence, offboarding.

Module map: ``app`` (routes, error middleware, lifecycle), ``auth`` (subject and operator
tokens), ``scopes`` (create, consent, status), ``entries`` (inspect, forget one), ``erase``
(confirmed forget-all and off, offboarding), ``evidence`` (erasure answers), ``models`` and
``openapi`` (the published contract), ``client`` (an async client for the CLI and the drill).
See docs/control-api.md.
"""
