# METADATA
# title: memgov decision
# description: |
#   Reference rules for governed memory (SPEC D5). The input is memgov's engine-neutral
#   decision input (docs/schema/decision-input.schema.json). Every rule adds one reason code to
#   deny; the request is allowed only when deny is empty. A missing or malformed decision is a
#   denial on memgov's side, and a fact that is missing from the input satisfies no "ok" rule,
#   so it denies here too.
# scope: package
package memgov.decision

# METADATA
# title: result
# description: The engine answer memgov queries, {"allow", "reasons"}.
# entrypoint: true
result := {"allow": allow, "reasons": sort(deny)}

# METADATA
# title: allow
# description: Allowed when no rule denies.
# scope: document
default allow := false

allow if count(deny) == 0

keyed_operations := {
	"memory.save",
	"memory.save_batch",
	"memory.search",
	"memory.list",
	"memory.delete_all",
}

save_operations := {"memory.save", "memory.save_batch"}

# Invokes of agents without memory carry nothing to govern.
governed_invoke if {
	input.operation == "a2a.invoke"
	is_true(input.agent.memory_enabled)
}

# Operations that need an attested room, audience and delegation context.
attested if input.operation == "control.inspect"

attested if governed_invoke

keyed if input.operation in keyed_operations

saves if input.operation in save_operations

# Operations that need an enabled consent scope.
scoped if attested

scoped if keyed

# Operations charged against budgets.
memory_work if scoped

memory_work if input.operation == "embedding"

has_scope if is_object(input.scope)

has_principal if is_object(input.principal)

has_agent if is_object(input.agent)

delegation_present if is_true(input.request.context.present)

# is_true holds only for the boolean true, so a missing flag never passes.
is_true(true)

# complete holds for a partner record that names every field R-13 requires.
complete(partner) if {
	is_number(partner.retention_days)
	partner.retention_days > 0
	every field in partner_text_fields {
		is_string(partner[field])
		partner[field] != ""
	}
}

partner_text_fields := {
	"controller",
	"processor",
	"purpose",
	"classification",
	"residency",
	"erasure_owner",
	"principal_binding",
}

# is_false holds only for the boolean false, so a missing flag never reads as "not expired".
is_false(false)
