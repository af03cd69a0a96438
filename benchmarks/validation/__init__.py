"""perfbisect's validation rounds: one driver, the rounds as data.

Each round of docs/validation/ that bisected public projects or ran the simulation tables is a file of
``rounds/`` (``rounds.py`` says what a file holds): which projects and ranges, which workloads and config
differences, how many runs, the seeds a simulation covered, the engine commit that ran and where its results are
kept. The code that carries a round out exists once, here: ``configs`` (one perfbisect.toml per run),
``driver`` (the runs, through perfbisect's command line), ``summarize`` (summary.txt), ``check_gates`` (each
stored verdict's own checks, through the engine's public API). The workloads the rounds ran are in
``workloads/``; packaging's is tools/validate_public_project.py's own. Results stay in docs/validation/, as
records.

    python -m benchmarks.validation --help
"""

from .rounds import Round, Run, all_rounds, load, problems  # noqa: F401
