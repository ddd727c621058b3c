package memgov.decision_test

import data.memgov.decision

test_ungoverned_store_is_denied if {
	decision.deny == {"ungoverned_store"} with input as object.union(save, {"operation": "memory.ungoverned"})
}

test_governed_save_is_not_an_ungoverned_store if {
	not "ungoverned_store" in decision.deny with input as save
}
