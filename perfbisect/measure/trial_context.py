"""What measuring needs opened before a trial: ``TrialContext``, the part of a command's workspace this layer reads.

The use cases open it (``perfbisect.app.workspace.Workspace``, the composition root) and hand it down; measuring
names here only what it reads, so it never imports the layer that builds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..git.gitrepo import TargetRepo
    from ..git.patches import PatchStack
    from ..git.worktrees import WorktreePool
    from ..model import NoiseKey
    from ..settings import Config, ModeConfig
    from ..store import Store
    from .build import BuildCache
    from .environments import Environments
    from .workload_files import Snapshot


class TrialContext(Protocol):
    """The config, the target repository, the results store, the patch stack and the caches a trial runs with."""

    config: Config
    repo: TargetRepo
    store: Store
    stack: PatchStack | None
    build_cache: BuildCache
    host: str  # this host's fingerprint (measure.host.host_fingerprint): trials pool only on one
    environments: Environments | None  # each commit's environment, when [environment] is set

    @property
    def pool(self) -> WorktreePool:
        """perfbisect's worktrees of the target."""

    @property
    def workload_files(self) -> Snapshot | None:
        """``workload.files`` as the command took them (None: none listed)."""

    def noise_key(self, mode: ModeConfig) -> NoiseKey:
        """The key trials of ``mode`` on this host with this workload share their noise under."""
