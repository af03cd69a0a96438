"""The command line (Typer + Rich): ``main`` holds the `perfbisect` command and its one error boundary,
the modules beside it its commands by what they do, ``options`` what they share. `python -m perfbisect.cli`
runs it (``__main__``)."""
