"""No way around memgov: which pods the cluster's NetworkPolicies let reach kagent's controller.

``model`` describes an install (its pods, the flows that matter, witnesses for every ingress
rule) without I/O; ``cyclonus`` asks the cyclonus NetworkPolicy engine which flows the policies
allow; ``doctor`` is ``memgov doctor``, which names every path around memgov and the policy
that opens it (docs/boundary.md).
"""
