package memgov.decision

# METADATA
# title: consent_missing
# description: No save, search, prefetch, load or inspect without an explicit consent scope (R-1).
# custom:
#   reason: consent_missing
deny contains "consent_missing" if {
	scoped
	not has_scope
}

# METADATA
# title: consent_disabled
# description: A withdrawn or never-enabled scope admits no memory work (R-1, R-4).
# custom:
#   reason: consent_disabled
deny contains "consent_disabled" if {
	scoped
	has_scope
	not is_true(input.scope.enabled)
}

# METADATA
# title: stale_generation
# description: Every keyed read and write must present the current consent generation (R-4, D2).
# custom:
#   reason: stale_generation
deny contains "stale_generation" if {
	keyed
	has_scope
	not current_generation
}

# METADATA
# title: key_invalid
# description: A session key whose MAC fails, or two different user ids in one call, identify nobody (D1).
# custom:
#   reason: key_invalid
deny contains "key_invalid" if {
	keyed
	not key_ok
}

# METADATA
# title: agent_mismatch
# description: Memory belongs to one exact agent; name collisions and foreign agents are refused (D1, R-3).
# custom:
#   reason: agent_mismatch
deny contains "agent_mismatch" if {
	agent_bound
	not agent_ok
}

# METADATA
# title: scope_mismatch
# description: The principal and the attested room must be exactly the consented ones (R-2, R-3).
# custom:
#   reason: scope_mismatch
deny contains "scope_mismatch" if {
	scoped
	has_scope
	has_principal
	not principal_matches_scope
}

# METADATA
# title: scope_mismatch
# description: The delegation context must claim exactly the consented control room (R-3).
# custom:
#   reason: scope_mismatch
deny contains "scope_mismatch" if {
	attested
	has_scope
	delegation_present
	not claimed_scope_matches
}

# METADATA
# description: The presented session key carries the scope's current generation.
current_generation if {
	is_number(input.request.presented_generation)
	input.request.presented_generation == input.scope.generation
}

# METADATA
# description: The session key verified and every user id carrier holds it.
key_ok if {
	is_true(input.request.key_valid)
	is_true(input.request.user_id_matches)
}

# METADATA
# description: Operations whose target agent must be the scope's memory-enabled agent.
# scope: document
agent_bound if scoped

agent_bound if input.operation == "embedding"

# METADATA
# description: The agent is known, memory-enabled where needed, the scope's own, and named and claimed correctly.
agent_ok if {
	has_agent
	not agent_memory_missing
	not agent_foreign
	not agent_name_wrong
	not agent_claim_wrong
}

# METADATA
# description: A keyed call or an embedding for an agent memgov does not govern as memory-enabled.
agent_memory_missing if {
	not attested
	not is_true(input.agent.memory_enabled)
}

# METADATA
# description: The scope belongs to another agent (hyphen/underscore twins included).
agent_foreign if {
	scoped
	has_scope
	not input.scope.agent == input.agent.ref
}

# METADATA
# description: The body or header agent name is not the scope agent's app_name.
agent_name_wrong if {
	keyed
	not is_true(input.request.agent_name_matches)
}

# METADATA
# description: The delegation context claims another agent.
agent_claim_wrong if {
	attested
	delegation_present
	not input.request.context_agent == input.agent.ref
}

# METADATA
# description: The acting principal is the scope's principal, with the same origin.
principal_matches_scope if {
	input.principal.mxid == input.scope.principal_mxid
	input.principal.origin == input.scope.origin
}

# METADATA
# description: The delegation context claims exactly the scope's kind and room.
claimed_scope_matches if {
	input.request.context_scope.kind == input.scope.kind
	input.request.context_scope.room_id == input.scope.room_id
}
