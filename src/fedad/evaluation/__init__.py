"""Evaluation, by job: :mod:`.families` computes the metric families from the clients'
evaluate replies, :mod:`.columns` says how they are shown (and what ``metrics.json`` says
of them: no numpy, no method, for the report and the CLI summary), :mod:`.samples` keeps
the anomaly maps and representations the report draws."""
