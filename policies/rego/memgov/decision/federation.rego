package memgov.decision

# METADATA
# title: principal_invalid
# description: A principal is a complete MXID; a native one lives on the local homeserver (R-2).
# custom:
#   reason: principal_invalid
deny contains "principal_invalid" if {
	attested
	not principal_ok
}

# METADATA
# title: origin_not_allowed
# description: Federation is denied by default; non-native origins need a complete partner record (R-13).
# custom:
#   reason: origin_not_allowed
deny contains "origin_not_allowed" if {
	scoped
	has_principal
	input.principal.origin != "native"
	not origin_admitted
}

# METADATA
# title: origin_not_allowed
# description: A keyed call without a known principal is admitted only for a native scope (R-13).
# custom:
#   reason: origin_not_allowed
deny contains "origin_not_allowed" if {
	scoped
	not has_principal
	has_scope
	input.scope.origin != "native"
}

# METADATA
# title: audience_mismatch
# description: Memory is never shown to a classification or homeserver the scope does not cover (R-3, R-13).
# custom:
#   reason: audience_mismatch
deny contains "audience_mismatch" if {
	attested
	not audience_ok
}

# METADATA
# description: A complete MXID; a native one on the local homeserver.
principal_ok if {
	has_principal
	input.principal.localpart != ""
	input.principal.server_name != ""
	not native_elsewhere
}

# METADATA
# description: A native principal of another homeserver.
native_elsewhere if {
	input.principal.origin == "native"
	input.principal.server_name != input.deployment.server_name
}

# METADATA
# description: A complete partner record admits the principal's server and origin.
origin_admitted if {
	some partner in input.deployment.federation_partners
	complete(partner)
	partner.server_name == input.principal.server_name
	input.principal.origin in partner.origins
}

# METADATA
# description: The audience has the local classification, includes the local homeserver and nothing uncovered.
audience_ok if {
	input.audience.classification == input.deployment.classification
	input.deployment.server_name in input.audience.servers
	every server in input.audience.servers {
		server in audience_servers
	}
}

# METADATA
# description: The local homeserver and every server a complete partner record of the local classification names.
# scope: document
audience_servers contains input.deployment.server_name

audience_servers contains partner.server_name if {
	some partner in input.deployment.federation_partners
	complete(partner)
	partner.classification == input.deployment.classification
}
