package memgov.decision

# METADATA
# title: room_state_invalid
# description: |
#   Only a v12, plaintext, invite-only, joined-history room whose members are exactly the
#   subject, the bridge bot and the agent ghost, with nobody invited and a server ACL admitting
#   only the local homeserver (R-5).
# custom:
#   reason: room_state_invalid
deny contains "room_state_invalid" if {
	attested
	not room_ok
}

# METADATA
# title: context_missing
# description: A memory-enabled delegation needs the bridge's signed context (SPEC §5).
# custom:
#   reason: context_missing
deny contains "context_missing" if {
	attested
	not delegation_present
}

# METADATA
# title: context_invalid
# description: A context whose signature or claims do not verify attests nothing.
# custom:
#   reason: context_invalid
deny contains "context_invalid" if {
	attested
	delegation_present
	not is_true(input.request.context.valid)
}

# METADATA
# title: context_expired
# description: The verifier found the context expired.
# custom:
#   reason: context_expired
deny contains "context_expired" if {
	attested
	delegation_present
	not is_false(input.request.context.expired)
}

# METADATA
# title: context_expired
# description: A context is good until its exp claim; at exp and after it is expired.
# custom:
#   reason: context_expired
deny contains "context_expired" if {
	attested
	delegation_present
	is_number(input.request.context.expires_at)
	input.now >= input.request.context.expires_at
}

# METADATA
# title: context_replayed
# description: A context is single use; a seen jti is refused.
# custom:
#   reason: context_replayed
deny contains "context_replayed" if {
	attested
	delegation_present
	not is_false(input.request.context.replayed)
}

# METADATA
# description: The attested room is exactly the single-subject control room (R-5).
room_ok if {
	room := input.room
	room.room_version == "12"
	room.encrypted == false
	room.join_rule == "invite"
	room.history_visibility == "joined"
	{member | some member in room.members} == expected_members
	count(room.invited) == 0
	{server | some server in room.server_acl.allow} == {input.deployment.server_name}
	room.server_acl.allow_ip_literals == false
}

# METADATA
# description: The members a control room must have (subject, bridge bot and agent ghost).
expected_members := {input.principal.mxid, input.deployment.bridge_bot, input.deployment.agent_ghost}
