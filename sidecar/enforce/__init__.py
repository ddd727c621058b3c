"""Governed handlers for the data plane, in pipeline order per traffic class (see docs/enforcement.md)."""

from __future__ import annotations

from sidecar.enforce.embedding import handle_embedding
from sidecar.enforce.invoke import handle_invoke
from sidecar.enforce.memory import handle_list_or_delete, handle_save, handle_save_batch, handle_search
from sidecar.proxy import ClassHandler
from sidecar.routes import RouteClass


def governed_handlers() -> dict[RouteClass, ClassHandler]:
    """The class table entries that replace the transparent defaults once governance is on."""
    return {
        RouteClass.A2A_INVOKE: handle_invoke,
        RouteClass.MEMORY_SAVE: handle_save,
        RouteClass.MEMORY_SAVE_BATCH: handle_save_batch,
        RouteClass.MEMORY_SEARCH: handle_search,
        RouteClass.MEMORY_LIST: handle_list_or_delete,
        RouteClass.MEMORY_DELETE_ALL: handle_list_or_delete,
        RouteClass.EMBEDDING: handle_embedding,
    }
