"""``fedad bench``: which method on which data, on data never tuned on.

:mod:`.suites` (the shipped suites and a user's config as a suite), :mod:`.expand` (every
method and detector for a data kind, or ``--methods``), :mod:`.run` (the runs, resumable),
:mod:`.results` (``results.csv`` / ``results.json``), :mod:`.ranks` (average ranks and the
critical-difference test), :mod:`.leaderboard` (``leaderboard.html``). docs/bench.md is the
user's guide.
"""
