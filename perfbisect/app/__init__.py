"""Use cases: wire config, git, build, server, workload, sampler, store, statistics and search.

Each public function here is one thing a user asks for, in a module by what it does: ``bisection``
(run a bisection, and what `run` and `resume` show after its search), ``resume`` (what resuming a
stored bisection takes over), ``planning`` (a range's plan and what bisecting it would cost: `plan`,
`run`'s budget question), ``measuring`` (measure a commit, compare two), ``calibration`` (the noise a
command decides with and keeps, and calibrate), ``reports`` (render what is stored) and
``housekeeping`` (skip, patches check, gc, doctor). They report progress through a ``Progress`` sink
(``runtime.progress``), raise ``PerfbisectError`` subclasses, and never print: ``cli/`` does that. ``workspace`` is
what a command opens (the composition root: config, repository, store, patch stack, caches, locks), and ``slurmjob``
the entry point of a Slurm job, which opens one on its node. What they stand on: ``measure.trials`` (one server
session per trial, observations), ``measure.launch_checks`` (``preflight``), ``executors`` (where a search's trials
run) and ``report`` (results as text and HTML).

Importing this package imports none of its modules.
"""
