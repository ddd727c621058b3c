"""What every governed request shares, on the data plane and the control API alike.

``facts`` turns a request and its scope into decision-input facts (pure), ``context`` verifies and
spends the delegation context once per request, and ``respond`` asks the policy runtime, records
the decision (log, metric, audit row or refusal count) and builds the content-free answer. Both
``enforce`` and ``control`` build on these; neither imports the other.
"""
