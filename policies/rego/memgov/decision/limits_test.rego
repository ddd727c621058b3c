package memgov.decision_test

import data.memgov.decision

test_entry_cap_boundaries if {
	decision.allow with input as object.union(save, {"entries": {"count": 99}})
	decision.deny == {"entry_cap_reached"} with input as object.union(save, {"entries": {"count": 100}})
	decision.deny == {"entry_cap_reached"} with input as object.union(save, {"entries": {"count": 101}})
}

test_fact_size_boundaries if {
	decision.allow with input as object.union(save, {"request": {"max_item_bytes": 512}})
	decision.deny == {"fact_too_large"} with input as object.union(save, {"request": {"max_item_bytes": 513}})
}

test_batch_size_boundaries if {
	batch := object.union(save, {"operation": "memory.save_batch", "entries": {"count": 0}})
	decision.allow with input as object.union(batch, {"request": {"item_count": 10}})
	decision.deny == {"batch_too_large"} with input as object.union(batch, {"request": {"item_count": 11}})
}

test_embedding_item_size_boundaries if {
	embed := {"operation": "embedding", "agent": agent, "request": {"item_count": 2}, "budget": budget}
	decision.allow with input as object.union_n([save, embed, {"request": {"max_item_bytes": 512}}])
	too_large := object.union_n([save, embed, {"request": {"max_item_bytes": 513}}])
	decision.deny == {"embedding_item_too_large"} with input as too_large
}

test_embedding_item_count_boundaries if {
	embed := {"operation": "embedding", "agent": agent, "budget": budget}
	decision.allow with input as object.union_n([save, embed, {"request": {"item_count": 10, "max_item_bytes": 8}}])
	eleven := object.union_n([save, embed, {"request": {"item_count": 11, "max_item_bytes": 8}}])
	decision.deny == {"batch_too_large"} with input as eleven
}

test_budget_flags_map_to_reasons if {
	decision.deny == {"rate_limited"} with input as object.union(save, {"budget": {"rate_ok": false}})
	decision.deny == {"hourly_budget_exhausted"} with input as object.union(save, {"budget": {"hourly_ok": false}})
	decision.deny == {"hourly_budget_exhausted"} with input as object.union(save, {"budget": {"embedding_ok": false}})
	decision.deny == {"prefetch_limit"} with input as object.union(save, {"budget": {"prefetch_ok": false}})
}

capped_helper := {"deployment": {"limits": {"agent_limits": [{
	"agents": ["team/helper"],
	"embedding_items_per_agent_hour": 50,
}]}}}

one_item := {"operation": "embedding", "request": {"item_count": 1, "max_item_bytes": 8}}

test_agent_embedding_cap_boundaries if {
	embed := object.union_n([save, capped_helper, one_item])
	decision.allow with input as object.union(embed, {"budget": {"embedding_items_used": 50}})
	over := object.union(embed, {"budget": {"embedding_items_used": 51}})
	decision.deny == {"hourly_budget_exhausted"} with input as over
}

test_agent_embedding_cap_through_an_org_list if {
	listed := {"deployment": {
		"org": {"bulk_agents": ["team/helper"]},
		"limits": {"agent_limits": [{"lists": ["bulk_agents"], "embedding_items_per_agent_hour": 50}]},
	}}
	embed := object.union_n([save, listed, one_item, {"budget": {"embedding_items_used": 51}}])
	decision.deny == {"hourly_budget_exhausted"} with input as embed
}

test_unnamed_agent_keeps_the_global_embedding_cap if {
	patch := {"op": "replace", "path": "/deployment/limits/agent_limits/0/agents/0", "value": "team/other"}
	other := json.patch(capped_helper, [patch])
	embed := object.union_n([save, other, one_item])
	decision.allow with input as object.union(embed, {"budget": {"embedding_items_used": 600}})
	over := object.union(embed, {"budget": {"embedding_items_used": 601}})
	decision.deny == {"hourly_budget_exhausted"} with input as over
}

test_agent_hourly_operations_cap_boundaries if {
	limited := {"deployment": {"limits": {"agent_limits": [{"agents": ["team/helper"], "hourly_operations": 20}]}}}
	decision.allow with input as object.union_n([save, limited, {"budget": {"hourly_operations_used": 20}}])
	over := object.union_n([save, limited, {"budget": {"hourly_operations_used": 21}}])
	decision.deny == {"hourly_budget_exhausted"} with input as over
}
