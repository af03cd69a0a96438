"""One trial: build, its environment, server, workload, system state, host checks, versions, noise figures, run allocation, the workspace a command opens.

Importing the package imports none of its modules."""
