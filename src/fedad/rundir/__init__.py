"""A run directory, in one package: its layout (:mod:`.layout`, every name fedad writes),
link-safe atomic files (:mod:`.files`), claiming it for a run, ``--force`` and ``--resume``
(:mod:`.claim`), the standard files (:mod:`.outputs`), checkpoints (:mod:`.checkpoints`),
what the run was trained on (:mod:`.fingerprint`) and how it turned data into inputs
(:mod:`.inputs`), and reading it back: :func:`fedad.load` (:mod:`.load`) and ``fedad score``
(:mod:`.score`). Everything read here is untrusted (docs/runs.md)."""
