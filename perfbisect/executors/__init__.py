"""Where a search's trials run: the one search loop (``loop``) and the executors it drives — this host
(``local``) and Slurm (``slurm``, and the fixed batch script ``slurm_job.sh``; the job's own entry point, which
opens a workspace on its node, is the use case ``perfbisect.app.slurmjob``). A new executor (Kubernetes, say) is one
more module here that speaks ``loop.Executor``.

Importing the package imports none of its modules."""
