"""The executor a config names, as the use case asks for it: it never reads ``[executor] kind`` itself.

``measures_here(config)``: whether the trials run on this host (its noise is this host's to keep; a command holds
this node's GPU lock for them). ``search_executor``: the one the search loop drives. ``ModesMeasurer``: the
which-path step's trials (the culprit and its parent, every other mode), on this host or as one cluster job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # the command line asks ``measures_here`` before anything heavy is loaded
    from ..runtime.progress import Progress
    from ..model import Commit, TrialResult
    from .loop import Executor
    from .slurm import JobContext


def measures_here(config) -> bool:
    """Whether the configured executor runs its trials on this host (``local``), not on cluster nodes."""
    return config.executor.kind == "local"


def search_executor(ws: JobContext, bisection_id: int, progress: Progress, *, by_sha: dict[str, Commit],
                    client_rev: str, wait_idle_s: float = 0.0) -> Executor:
    """The executor of a bisection's search: trials on this host one at a time, or Slurm jobs up to
    ``executor.nodes`` at once (``client_rev``: the revision whose benchmark client measures every trial)."""
    if not measures_here(ws.config):
        from .slurm import SlurmExecutor

        return SlurmExecutor(ws, bisection_id, progress)
    from ..measure.trials import TrialRunner
    from .local import LocalExecutor

    runner = TrialRunner(ws, progress, wait_idle_s=wait_idle_s, client_rev=client_rev)
    return LocalExecutor(runner, bisection_id, by_sha)


class ModesMeasurer:
    """The which-path step's trials: ``modes`` at both commits of a pair up to ``target`` measured trials each,
    interleaved — on this host (one runner kept across rounds), or as one Slurm job on one node (a level offset
    between nodes cannot then pass for the path that regressed)."""

    def __init__(self, ws: JobContext, bisection_id: int, progress: Progress, wait_idle_s: float = 0.0):
        self.ws, self.bisection_id, self.progress, self.wait_idle_s = ws, bisection_id, progress, wait_idle_s
        self._runner = None

    def __call__(self, pair: Sequence[Commit], modes: Sequence[str], target: int, stored: list[TrialResult]) -> int:
        """Measure, and bring ``stored`` (the bisection's trials) up to date; how many trials ran."""
        if not measures_here(self.ws.config):
            from .slurm import measure_modes as on_a_node

            ran = on_a_node(self.ws, self.bisection_id, pair, modes, target, self.progress)
            stored[:] = self.ws.store.trials(bisection_id=self.bisection_id)
            return ran
        from ..measure.search_trials import measure_modes
        from ..measure.trials import TrialRunner

        self._runner = self._runner or TrialRunner(self.ws, self.progress, wait_idle_s=self.wait_idle_s)
        return len(measure_modes(self._runner, pair, modes, target, self.bisection_id, stored))
