"""Chart tests: real helm lint/template, Kubernetes schema validation, NetworkPolicy reachability."""
