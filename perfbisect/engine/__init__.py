"""Statistics and search: the noise model, the change-point posterior, the bisection policy, its lookahead and cost, which path regressed.

Importing the package imports none of its modules."""
