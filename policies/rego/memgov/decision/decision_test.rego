package memgov.decision_test

import data.memgov.decision

limits := {
	"max_days": 7,
	"max_entries": 100,
	"max_fact_bytes": 512,
	"max_batch_facts": 10,
	"rate_per_minute": 6,
	"rate_burst": 3,
	"hourly_operations": 60,
	"prefetch_searches": 8,
	"prefetch_query_bytes": 512,
	"embedding_item_bytes": 512,
	"search_max_limit": 10,
	"embedding_items_per_agent_hour": 600,
	"embedding_items_per_source_hour": 150,
	"agent_limits": [],
}

deployment := {
	"server_name": "example.org",
	"bridge_bot": "@bridge:example.org",
	"agent_ghost": "@agent-helper:example.org",
	"classification": "private",
	"federation_partners": [],
	"limits": limits,
}

alice := {
	"mxid": "@alice:example.org",
	"localpart": "alice",
	"server_name": "example.org",
	"origin": "native",
}

scope := {
	"scope_id": "s_1",
	"kind": "control_room",
	"room_id": "!ctl:example.org",
	"enabled": true,
	"generation": 3,
	"purpose": "assistant-memory",
	"policy_version": "v1",
	"principal_mxid": "@alice:example.org",
	"origin": "native",
	"agent": "team/helper",
}

agent := {"ref": "team/helper", "app_name": "team__NS__helper", "memory_enabled": true}

budget := {
	"rate_ok": true,
	"hourly_ok": true,
	"prefetch_ok": true,
	"embedding_ok": true,
	"embedding_items_used": 0,
	"hourly_operations_used": 1,
}

# A valid memory.save of one small fact at the current generation.
save := {
	"operation": "memory.save",
	"principal": alice,
	"agent": agent,
	"scope": scope,
	"request": {
		"presented_generation": 3,
		"key_valid": true,
		"user_id_matches": true,
		"agent_name_matches": true,
		"item_count": 1,
		"max_item_bytes": 100,
		"context": {"present": false, "valid": false, "expired": false, "replayed": false, "expires_at": null},
		"context_scope": null,
		"context_agent": null,
	},
	"room": null,
	"audience": null,
	"budget": budget,
	"entries": {"count": 5, "cap": 100},
	"now": 1800000000,
	"deployment": deployment,
}

# A valid a2a.invoke from the subject's control room with a fresh delegation context.
invoke := {
	"operation": "a2a.invoke",
	"principal": alice,
	"agent": agent,
	"scope": scope,
	"request": {
		"presented_generation": null,
		"key_valid": false,
		"user_id_matches": false,
		"agent_name_matches": false,
		"item_count": 0,
		"max_item_bytes": 0,
		"context": {"present": true, "valid": true, "expired": false, "replayed": false, "expires_at": 1800000060},
		"context_scope": {"kind": "control_room", "room_id": "!ctl:example.org"},
		"context_agent": "team/helper",
	},
	"room": {
		"room_version": "12",
		"encrypted": false,
		"join_rule": "invite",
		"history_visibility": "joined",
		"members": ["@alice:example.org", "@bridge:example.org", "@agent-helper:example.org"],
		"invited": [],
		"server_acl": {"allow": ["example.org"], "deny": [], "allow_ip_literals": false},
	},
	"audience": {"servers": ["example.org"], "classification": "private"},
	"budget": budget,
	"entries": {"count": 5, "cap": 100},
	"now": 1800000000,
	"deployment": deployment,
}

test_valid_save_is_allowed if {
	decision.result == {"allow": true, "reasons": []} with input as save
}

test_valid_invoke_is_allowed if {
	decision.result == {"allow": true, "reasons": []} with input as invoke
}

test_empty_input_is_denied if {
	not decision.allow with input as {"operation": "memory.save"}
}

test_invoke_of_agent_without_memory_is_allowed if {
	plain := object.union(invoke, {"agent": {"memory_enabled": false}, "scope": null, "room": null})
	decision.allow with input as plain
}

test_reasons_are_sorted if {
	both := object.union(save, {"scope": null, "request": {"key_valid": false}})
	decision.result.reasons == ["consent_missing", "key_invalid"] with input as both
}

test_an_input_without_an_operation_is_never_allowed if {
	not decision.allow with input as object.remove(save, {"operation"})
}

test_an_unknown_operation_is_never_allowed if {
	not decision.allow with input as object.union(save, {"operation": "memory.rename"})
}

test_every_known_operation_can_be_allowed if {
	every operation in decision.known_operations {
		decision.known_operation with input as object.union(save, {"operation": operation})
	}
}
