"""The ``fedad`` command line (:mod:`fedad.cli.app` assembles it; ``main`` is the console
script): one module per sub-command group, sharing :mod:`fedad.cli.options`."""
