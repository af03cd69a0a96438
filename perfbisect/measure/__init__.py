"""One trial: build, its environment, server, workload, system state, host checks, versions, noise figures, run allocation, the checks before a launch, and what a trial needs opened (``TrialContext``).

Importing the package imports none of its modules."""
