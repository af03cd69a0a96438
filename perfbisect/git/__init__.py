"""The target's history: the repository, path filters, the patch stack, worktrees, pinned dependencies, the plan of a range, skipped commits.

Importing the package imports none of its modules."""
