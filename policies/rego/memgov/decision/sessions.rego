package memgov.decision

# METADATA
# title: share_refused
# description: |
#   A memory agent's conversation is owned by a session key and holds recalled memory: no link
#   may carry it outside its room's audience, and a share of a session whose owner is unknown is
#   refused too.
# custom:
#   reason: share_refused
deny contains "share_refused" if {
	input.operation == "session.share"
	not shared_by_a_user
}

# METADATA
# description: kagent showed the shared session as owned by a user, not by a memgov session key.
shared_by_a_user if input.request.share.owner == "user"
