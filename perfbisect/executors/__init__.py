"""Where a search's trials run: the one search loop (``loop``) and the executors it drives — this host
(``local``) and Slurm (``slurm``, with the job's own entry point ``slurmjob``). A new executor (Kubernetes, say)
is one more module here that speaks ``loop.Executor``.

Importing the package imports none of its modules."""
