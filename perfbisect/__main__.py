"""`python -m perfbisect ARGS`: the `perfbisect` command, as `python -m perfbisect.cli` runs it."""

if __name__ == "__main__":
    from .interrupts import install_early_handlers

    install_early_handlers()

    from .cli.main import main  # after the handlers, on purpose

    main()
