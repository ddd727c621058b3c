package memgov.decision_test

import data.memgov.decision

test_room_variants_are_invalid if {
	every change in [
		{"room_version": "11"},
		{"encrypted": true},
		{"join_rule": "public"},
		{"history_visibility": "shared"},
		{"invited": ["@eve:example.org"]},
		{"members": ["@alice:example.org", "@bridge:example.org"]},
		{"server_acl": {"allow": ["*"]}},
		{"server_acl": {"allow_ip_literals": true}},
	] {
		decision.deny == {"room_state_invalid"} with input as object.union(invoke, {"room": change})
	}
}

test_unattested_room_is_invalid if {
	decision.deny == {"room_state_invalid"} with input as object.union(invoke, {"room": null})
}

test_missing_context_is_context_missing if {
	absent := {"present": false, "valid": false, "expired": false, "replayed": false, "expires_at": null}
	decision.deny == {"context_missing"} with input as object.union(invoke, {"request": {"context": absent}})
}

test_unverified_context_is_context_invalid if {
	decision.deny == {"context_invalid"} with input as object.union(invoke, {"request": {"context": {"valid": false}}})
}

test_context_at_exp_is_expired if {
	decision.deny == {"context_expired"} with input as object.union(invoke, {"now": 1800000060})
}

test_context_one_second_before_exp_is_fresh if {
	decision.allow with input as object.union(invoke, {"now": 1800000059})
}

test_replayed_context_is_refused if {
	decision.deny == {"context_replayed"} with input as object.union(invoke, {"request": {"context": {"replayed": true}}})
}
