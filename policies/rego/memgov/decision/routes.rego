package memgov.decision

# METADATA
# title: ungoverned_store
# description: Runtimes whose memory routes carry no scope or generation cannot be governed.
# custom:
#   reason: ungoverned_store
deny contains "ungoverned_store" if input.operation == "memory.ungoverned"
