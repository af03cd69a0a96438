"""`python -m perfbisect.cli ARGS`: the `perfbisect` command, as its script runs it (``main.main``).

The signal handlers go in first, before typer, rich and the rest load (see ``main``): a SIGINT or
SIGTERM in the first moments is noted, and main() exits 128 + its number saying so.
"""

if __name__ == "__main__":
    from ..interrupts import install_early_handlers

    install_early_handlers()

    from .main import main  # after the handlers, on purpose

    main()
