package memgov.decision_test

import data.memgov.decision

write_facts := {
	"kind": "agents",
	"verb": "create",
	"targets": ["team/chat"],
	"governed": false,
	"operator": false,
	"claims": [],
}

controller_write := {
	"operation": "controller.write",
	"request": {"write": write_facts},
	"budget": budget,
	"entries": {"count": 0, "cap": 100},
	"now": 1800000000,
	"deployment": deployment,
}

with_write(changes) := object.union(controller_write, {"request": {"write": object.union(write_facts, changes)}})

test_an_ordinary_definition_passes_without_an_operator if {
	decision.allow with input as controller_write
}

test_a_governed_definition_needs_an_operator if {
	decision.deny == {"operator_required"} with input as with_write({"governed": true})
}

test_an_operator_changes_a_governed_definition if {
	decision.allow with input as with_write({"governed": true, "operator": true})
}

test_a_definition_claiming_the_boundary_is_refused_even_from_an_operator if {
	decision.deny == {"boundary_claimed"} with input as with_write({"operator": true, "claims": ["label"]})
}

test_a_write_whose_claims_were_never_read_is_refused if {
	decision.deny == {"boundary_claimed"} with input as json.remove(controller_write, ["request/write"])
}
