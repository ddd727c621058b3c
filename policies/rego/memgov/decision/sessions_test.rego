package memgov.decision_test

import data.memgov.decision

session_share := {
	"operation": "session.share",
	"request": {"share": share_facts},
	"budget": budget,
	"entries": {"count": 0, "cap": 100},
	"now": 1800000000,
	"deployment": deployment,
}

share_facts := {"verb": "create", "owner": "user"}

with_share(changes) := object.union(session_share, {"request": {"share": object.union(share_facts, changes)}})

test_a_user_shares_their_own_session if {
	decision.allow with input as session_share
}

test_a_session_key_owned_session_is_never_shared if {
	every verb in ["create", "list", "revoke", "use"] {
		decision.deny == {"share_refused"} with input as with_share({"verb": verb, "owner": "session_key"})
	}
}

test_a_session_whose_owner_is_unknown_is_not_shared if {
	decision.deny == {"share_refused"} with input as with_share({"owner": "unknown"})
}

test_a_share_without_its_facts_is_refused if {
	decision.deny == {"share_refused"} with input as json.remove(session_share, ["request/share"])
}
