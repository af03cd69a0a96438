"""Use cases: wire config, git, build, server, workload, sampler, store, statistics and search.

Each public function here is one thing a user asks for, in a module by what it does: ``bisection``
(run a bisection, and what `run` and `resume` show after its search), ``resume`` (what resuming a
stored bisection takes over), ``planning`` (a range's plan and what bisecting it would cost: `plan`,
`run`'s budget question), ``measuring`` (measure a commit, compare two), ``calibration`` (the noise a
command decides with and keeps, and calibrate), ``reports`` (render what is stored) and
``housekeeping`` (skip, patches check, gc, doctor). They report progress through a ``Progress`` sink,
raise ``PerfbisectError`` subclasses, and never print: ``cli/`` does that. What they stand on:
``measure.workspace`` (what a command opens, preflight, locks), ``measure.trials`` (one server session
per trial, observations), ``executors`` (where a search's trials run) and ``report`` (results as text
and HTML).

Importing this package imports none of its modules.
"""
