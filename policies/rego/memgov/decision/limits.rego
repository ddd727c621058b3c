package memgov.decision

# METADATA
# title: entry_cap_reached
# description: A write that would take the scope past its cap is refused; nothing is evicted (R-10).
# custom:
#   reason: entry_cap_reached
deny contains "entry_cap_reached" if {
	saves
	not within_cap
}

# METADATA
# title: fact_too_large
# description: A stored fact is at most max_fact_bytes UTF-8 bytes (R-10).
# custom:
#   reason: fact_too_large
deny contains "fact_too_large" if {
	saves
	not input.request.max_item_bytes <= input.deployment.limits.max_fact_bytes
}

# METADATA
# title: batch_too_large
# description: An automatic save stores, and one embedding call embeds, at most max_batch_facts items (R-10, R-11).
# custom:
#   reason: batch_too_large
deny contains "batch_too_large" if {
	input.operation in {"memory.save_batch", "embedding"}
	not input.request.item_count <= input.deployment.limits.max_batch_facts
}

# METADATA
# title: embedding_item_too_large
# description: Each embedding input is at most embedding_item_bytes UTF-8 bytes (R-11).
# custom:
#   reason: embedding_item_too_large
deny contains "embedding_item_too_large" if {
	input.operation == "embedding"
	not input.request.max_item_bytes <= input.deployment.limits.embedding_item_bytes
}

# METADATA
# title: rate_limited
# description: Explicit load/save share a per-minute sender+agent rate (R-11).
# custom:
#   reason: rate_limited
deny contains "rate_limited" if {
	memory_work
	not is_true(input.budget.rate_ok)
}

# METADATA
# title: hourly_budget_exhausted
# description: >-
#   Memory work per scope per hour is bounded, embedding items included, and each agent's embedding
#   items within its own cap (R-11).
# custom:
#   reason: hourly_budget_exhausted
deny contains "hourly_budget_exhausted" if {
	memory_work
	not hourly_ok
}

# METADATA
# title: prefetch_limit
# description: A new conversation may prefetch at most prefetch_searches times (R-11).
# custom:
#   reason: prefetch_limit
deny contains "prefetch_limit" if {
	memory_work
	not is_true(input.budget.prefetch_ok)
}

# METADATA
# description: The scope stays within its cap and max_entries after this write.
within_cap if {
	# Written as the room left under each cap, like the Cedar rule, where count + items could overflow.
	input.entries.count >= 0
	input.request.item_count >= 0
	input.entries.count <= input.entries.cap
	input.request.item_count <= input.entries.cap - input.entries.count
	input.entries.count <= input.deployment.limits.max_entries
	input.request.item_count <= input.deployment.limits.max_entries - input.entries.count
}

# METADATA
# description: >-
#   The hourly and the embedding reservations both succeeded, and the agent's embedding items this
#   hour are within its own cap.
hourly_ok if {
	is_true(input.budget.hourly_ok)
	is_true(input.budget.embedding_ok)
	input.budget.hourly_operations_used <= agent_cap("hourly_operations")
	input.budget.embedding_items_used <= agent_cap("embedding_items_per_agent_hour")
}

# METADATA
# description: >-
#   The target agent's value of a limit: the smallest value of every agent_limits entry setting it
#   and naming the agent, directly or through an org list, and the global value otherwise.
agent_cap(name) := min({input.deployment.limits[name]} | {value |
	some entry in input.deployment.limits.agent_limits
	value := entry[name]
	is_number(value)
	names_agent(entry)
})

# METADATA
# scope: document
# description: An agent_limits entry names the target agent, directly or through an org list.
names_agent(entry) if input.agent.ref in entry.agents

names_agent(entry) if {
	some name in entry.lists
	input.agent.ref in input.deployment.org[name]
}
