package memgov.decision

# METADATA
# title: operator_required
# description: |
#   A memory agent's definition, its memory-free variant and the ModelConfigs it uses change only
#   with an operator token: its model and memory settings are governance facts.
# custom:
#   reason: operator_required
deny contains "operator_required" if {
	input.operation == "controller.write"
	is_true(input.request.write.governed)
	not is_true(input.request.write.operator)
}

# METADATA
# title: boundary_claimed
# description: |
#   No definition may carry memgov's labels, names, service account or Secrets: kagent copies
#   them onto pods, Services and ServiceAccounts.
# custom:
#   reason: boundary_claimed
deny contains "boundary_claimed" if {
	input.operation == "controller.write"
	not claims_nothing
}

# METADATA
# description: The gateway read the write and found no field that claims memgov's boundary.
claims_nothing if {
	is_array(input.request.write.claims)
	count(input.request.write.claims) == 0
}
