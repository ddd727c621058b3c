"""Stand-ins for kagent's controller API (v0.9.11, or v0.10.0-rc3 on request) and an OpenAI-compatible
embedding provider.

They reproduce kagent's memory REST contract, flaws included, so the gateway can be tested,
demonstrated and benchmarked without a cluster. Entry points: :func:`start_devstack`,
:func:`create_kagent_app`, :func:`create_embedding_app`, :func:`open_memory_store`.
"""

from sidecar.dev.devstack.clock import DevClock
from sidecar.dev.devstack.embedding import EMBEDDING, EmbeddingFaults, create_embedding_app
from sidecar.dev.devstack.kagent import create_kagent_app
from sidecar.dev.devstack.recorder import RecordedRequest, Recorder
from sidecar.dev.devstack.releases import RELEASES, V0_9, V0_10, KagentRelease
from sidecar.dev.devstack.runtime import RuntimeConfig, app_name
from sidecar.dev.devstack.stack import Devstack, start_devstack
from sidecar.dev.devstack.state import RECORDER, STATE
from sidecar.dev.devstack.store import DbFault, MemoryRow, MemoryStore
from sidecar.dev.devstack.stores import open_memory_store

__all__ = [
    "EMBEDDING",
    "RECORDER",
    "RELEASES",
    "STATE",
    "V0_9",
    "V0_10",
    "DbFault",
    "DevClock",
    "Devstack",
    "EmbeddingFaults",
    "KagentRelease",
    "MemoryRow",
    "MemoryStore",
    "RecordedRequest",
    "Recorder",
    "RuntimeConfig",
    "app_name",
    "create_embedding_app",
    "create_kagent_app",
    "open_memory_store",
    "start_devstack",
]
