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
# description: |
#   Allowed when no rule denies and the operation is one the pack knows. An input without a
#   known operation matches no deny rule, so "nothing denies" alone would let it through; it is
#   refused instead (memgov reads a denial without a reason as route_denied, and Cedar
#   refuses such an input structurally: its schema declares every action).
# scope: document
default allow := false

allow if {
	count(deny) == 0
	known_operation
}

# METADATA
# description: The operation is one of the classes the decision input schema declares.
known_operation if input.operation in known_operations

# METADATA
# description: Every operation class of the decision input (docs/schema/decision-input.schema.json).
known_operations := {
	"a2a.invoke",
	"memory.save",
	"memory.save_batch",
	"memory.search",
	"memory.list",
	"memory.delete_all",
	"memory.ungoverned",
	"embedding",
	"control.inspect",
	"controller.write",
	"session.share",
}

# METADATA
# description: The memory calls that carry a session key as user_id.
keyed_operations := {
	"memory.save",
	"memory.save_batch",
	"memory.search",
	"memory.list",
	"memory.delete_all",
}

# METADATA
# description: The memory calls that store facts.
save_operations := {"memory.save", "memory.save_batch"}

# METADATA
# description: Invokes of agents without memory carry nothing to govern.
governed_invoke if {
	input.operation == "a2a.invoke"
	is_true(input.agent.memory_enabled)
}

# METADATA
# description: Operations that need an attested room, audience and delegation context.
# scope: document
attested if input.operation == "control.inspect"

attested if governed_invoke

# METADATA
# description: The operation carries a session key.
keyed if input.operation in keyed_operations

# METADATA
# description: The operation stores facts.
saves if input.operation in save_operations

# METADATA
# description: Operations that need an enabled consent scope.
# scope: document
scoped if attested

scoped if keyed

# METADATA
# description: Operations charged against budgets.
# scope: document
memory_work if scoped

memory_work if input.operation == "embedding"

# METADATA
# description: The input carries a scope record.
has_scope if is_object(input.scope)

# METADATA
# description: The input carries a principal.
has_principal if is_object(input.principal)

# METADATA
# description: The input carries a target agent.
has_agent if is_object(input.agent)

# METADATA
# description: A delegation context was sent.
delegation_present if is_true(input.request.context.present)

# METADATA
# description: Holds only for the boolean true, so a missing flag never passes.
is_true(true)

# METADATA
# description: Holds for a partner record that names every field R-13 requires.
complete(partner) if {
	is_number(partner.retention_days)
	partner.retention_days > 0
	every field in partner_text_fields {
		is_string(partner[field])
		partner[field] != ""
	}
}

# METADATA
# description: The fields a partner record must name before it admits anything (R-13).
partner_text_fields := {
	"controller",
	"processor",
	"purpose",
	"classification",
	"residency",
	"erasure_owner",
	"principal_binding",
}

# METADATA
# description: Holds only for the boolean false, so a missing flag never reads as "not expired".
is_false(false)
