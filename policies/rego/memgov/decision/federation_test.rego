package memgov.decision_test

import data.memgov.decision

partner := {
	"server_name": "partner.example",
	"origins": ["remote"],
	"controller": "Example Org",
	"processor": "Partner Org",
	"purpose": "assistant-memory",
	"classification": "private",
	"residency": "eu",
	"retention_days": 7,
	"erasure_owner": "Example Org privacy team",
	"principal_binding": "mxid",
}

remote_bob := {"mxid": "@bob:partner.example", "localpart": "bob", "server_name": "partner.example", "origin": "remote"}

remote_invoke(partners) := object.union(invoke, {
	"principal": remote_bob,
	"scope": {"principal_mxid": "@bob:partner.example", "origin": "remote"},
	"room": {"members": ["@bob:partner.example", "@bridge:example.org", "@agent-helper:example.org"]},
	"deployment": {"federation_partners": partners},
})

test_localpart_only_principal_is_invalid if {
	decision.deny == {"principal_invalid"} with input as object.union(invoke, {"principal": {"localpart": ""}})
}

test_native_principal_on_another_server_is_invalid if {
	elsewhere := object.union(invoke, {"principal": {"server_name": "evil.example"}})
	decision.deny == {"principal_invalid"} with input as elsewhere
}

test_remote_principal_without_partner_is_refused if {
	decision.deny == {"origin_not_allowed"} with input as remote_invoke([])
}

test_remote_principal_with_complete_partner_is_admitted if {
	decision.allow with input as remote_invoke([partner])
}

test_partner_missing_a_field_admits_nothing if {
	every field in ["controller", "residency", "principal_binding"] {
		incomplete := object.remove(partner, [field])
		decision.deny == {"origin_not_allowed"} with input as remote_invoke([incomplete])
	}
}

test_remote_homeserver_in_audience_is_audience_mismatch if {
	wide := object.union(invoke, {"audience": {"servers": ["example.org", "evil.example"]}})
	decision.deny == {"audience_mismatch"} with input as wide
}

test_partner_server_in_audience_is_admitted if {
	shared := object.union(invoke, {
		"audience": {"servers": ["example.org", "partner.example"]},
		"deployment": {"federation_partners": [partner]},
	})
	decision.allow with input as shared
}

test_other_classification_is_audience_mismatch if {
	public := object.union(invoke, {"audience": {"classification": "public"}})
	decision.deny == {"audience_mismatch"} with input as public
}
