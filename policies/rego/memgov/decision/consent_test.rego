package memgov.decision_test

import data.memgov.decision

test_save_without_scope_is_consent_missing if {
	decision.deny == {"consent_missing"} with input as object.union(save, {"scope": null})
}

test_disabled_scope_is_consent_disabled if {
	decision.deny == {"consent_disabled"} with input as object.union(save, {"scope": {"enabled": false}})
}

test_generation_off_by_one_is_stale if {
	every presented in [2, 4, null] {
		stale := object.union(save, {"request": {"presented_generation": presented}})
		decision.deny == {"stale_generation"} with input as stale
	}
}

test_bad_mac_is_key_invalid if {
	decision.deny == {"key_invalid"} with input as object.union(save, {"request": {"key_valid": false}})
}

test_two_user_ids_are_key_invalid if {
	decision.deny == {"key_invalid"} with input as object.union(save, {"request": {"user_id_matches": false}})
}

test_underscore_twin_agent_is_agent_mismatch if {
	twin := {"ref": "team/my_helper", "app_name": "team__NS__my_helper", "memory_enabled": true}
	hyphen := object.union(save, {"agent": twin, "scope": {"agent": "team/my-helper"}})
	decision.deny == {"agent_mismatch"} with input as hyphen
}

test_wrong_agent_name_is_agent_mismatch if {
	decision.deny == {"agent_mismatch"} with input as object.union(save, {"request": {"agent_name_matches": false}})
}

test_context_claiming_another_room_is_scope_mismatch if {
	other := object.union(invoke, {"request": {"context_scope": {"room_id": "!other:example.org"}}})
	decision.deny == {"scope_mismatch"} with input as other
}

test_appservice_posing_as_native_scope_is_denied if {
	bridged := object.union(save, {"principal": {"origin": "appservice"}})
	decision.deny == {"scope_mismatch", "origin_not_allowed"} with input as bridged
}
