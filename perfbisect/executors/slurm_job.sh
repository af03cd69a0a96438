#!/bin/sh
# perfbisect's Slurm job (perfbisect/executors/slurm.py submits it with sbatch). A fixed file: the job's
# arguments come as sbatch's trailing arguments, never as a script built from strings.
#   $1: the Python that runs perfbisect; the rest: arguments of `python -m perfbisect.app.slurmjob`.
python="$1"
shift
exec "$python" -m perfbisect.app.slurmjob "$@"
