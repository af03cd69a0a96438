"""The post-`git pull` hook: installing it, the queue, the detached worker, the check it runs, notifications.

Importing the package imports none of its modules."""
