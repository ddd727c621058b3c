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
