"""What every layer runs things with: child processes and their process groups, file locks, polling, log tails.

Importing the package imports none of its modules."""
