"""Slurm: submitting trials as jobs and the job's own entry point.

Importing the package imports none of its modules."""
