"""The built-in real data sets: importing this module registers them all.

========================= ======== =============================================================
name                      kind     where the files come from
========================= ======== =============================================================
``fashion_mnist``         image    Debian ``dataset-fashion-mnist`` or ``data.path`` (IDX)
``mnist``, ``kmnist``     image    ``data.path`` (IDX files)
``digits``                image    scikit-learn (8x8; ``data.size`` upsamples)
``lfw_subset``            image    scikit-image (100 faces, 100 non-faces, 25x25)
``breast_cancer``, ...    vector   scikit-learn (``wine``, ``iris`` too)
``cifar10``               image    ``data.path`` (python pickle batches)
``odds_shuttle`` ...      vector   Debian ``r-cran-mlbench`` or ``data.path`` (``.rda``);
                                   also found as ``shuttle``, ``satellite``, ...
``keystroke``             vector   ``data.path`` (CMU ``DSL-StrongPasswordData.csv``)
``graphs_molecules`` ...  graph    generated (:mod:`fedad.data.graph_domains`, four domains)
``textures``              image    Debian ``gimp-data`` patterns + scikit-image (defect masks)
``mvtec``                 image    ``data.path`` (MVTec AD folder or one category; masks)
``tu``                    graph    ``data.path`` (a TU Dortmund folder: MUTAG, PROTEINS, ...)
``mutag_structures``      graph    PyPI ``graphkernels`` 0.2.1 sdist (``scripts/setup.sh``)
``mutag_perturbed``       graph    the same; MUTAG normal against perturbed MUTAG anomalies
``table``                 vector   ``data.path`` (your own ``.csv``/``.tsv``/``.parquet``)
``image_folder``          image    ``data.path`` (your own folder of images per class)
========================= ======== =============================================================

See :mod:`fedad.data.idx`, :mod:`fedad.data.digits`, :mod:`fedad.data.cifar`,
:mod:`fedad.data.odds`, :mod:`fedad.data.sklearn_tables`, :mod:`fedad.data.lfw`,
:mod:`fedad.data.keystroke`, :mod:`fedad.data.mvtec`,
:mod:`fedad.data.table`, :mod:`fedad.data.image_folder`,
:mod:`fedad.data.graphs.tu` and :mod:`fedad.data.graphs.mutag` for the formats. Nothing is
downloaded at load time (``scripts/setup.sh`` fetches the ``graphkernels`` sdist,
hash-checked).
"""

from __future__ import annotations

from fedad.data import graph_domains as _graph_domains  # noqa: F401  (registers)
from fedad.data import image_folder as _image_folder  # noqa: F401  (registers)
from fedad.data import lfw as _lfw  # noqa: F401  (registers)
from fedad.data import mvtec as _mvtec  # noqa: F401  (registers)
from fedad.data import sklearn_tables as _sklearn_tables  # noqa: F401  (registers)
from fedad.data import table as _table  # noqa: F401  (registers)
from fedad.data import textures as _textures  # noqa: F401  (registers)
from fedad.data.cifar import load_cifar10
from fedad.data.digits import load_digits
from fedad.data.graphs import perturbed as _perturbed  # noqa: F401  (registers)
from fedad.data.graphs.mutag import load_mutag_structures
from fedad.data.graphs.tu import load_tu
from fedad.data.idx import load_fashion_mnist, load_kmnist, load_mnist
from fedad.data.keystroke import load_keystroke
from fedad.data.odds import (
    load_odds_breastw,
    load_odds_ionosphere,
    load_odds_satellite,
    load_odds_shuttle,
)

__all__ = [
    "load_cifar10",
    "load_digits",
    "load_fashion_mnist",
    "load_keystroke",
    "load_kmnist",
    "load_mnist",
    "load_mutag_structures",
    "load_odds_breastw",
    "load_odds_ionosphere",
    "load_odds_satellite",
    "load_odds_shuttle",
    "load_tu",
]
