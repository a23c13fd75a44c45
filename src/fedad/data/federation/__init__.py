"""Plan a federation from the ``[data]`` and ``[partition]`` sections, then materialize it.

:func:`plan_federation` (:mod:`.plan`) decides by global sample id where every sample goes;
what a partition scheme changes in a step is in its :class:`~.schemes.base.Scheme`
(:mod:`.schemes`: the class-skew schemes, ``by-source``, ``natural``, ``one-vs-rest``).
:func:`materialize` copies the samples. The sections come as :class:`DataSection` and
:class:`PartitionSpec` (:mod:`.sections`), not as the whole experiment config; poisoning
attacks are a separate step of the caller after planning (:mod:`fedad.attacks`).

The protocol (also in ``docs/data.md``); every random step draws from its own stream of
``numpy.random.SeedSequence(seed)``, so the result is a function of the sections and the
seed alone:

1. **Load.** ``data.name`` (with ``data.path``, ``data.size``), every extra entry of
   ``data.sources`` (``"name"`` or ``"name@path"``) and ``data.anomaly_source`` (with
   ``data.anomaly_source_path``). All must have the same kind and feature shape.
   Classes of data sets other than ``data.name`` get ids after it (``name:class``).
   Each loaded data set is checked once for NaN/Inf feature values, which
   ``data.missing`` turns into an error (default), dropped rows, or values imputed with
   the training mean at step 8 (:mod:`fedad.data.missing`).
2. **Normal and anomaly.** A class data set needs ``data.normal``; ``data.anomaly`` lists
   its anomaly classes and may be empty only when ``data.anomaly_source`` is set. Classes in
   neither list are not used. Data sets with a fixed definition (ODDS) must omit both:
   0 is normal, 1 anomaly. The ``normal``/``anomaly`` ids apply to every entry of
   ``data.sources``. **Every** sample of ``data.anomaly_source`` is an anomaly (its own
   classes are kept, offset, in ``c_train``); it adds to the anomaly classes of the main set.
   A *defect set* (``Dataset.defect``/``defect_test``: ``textures``, ``mvtec``) has product
   types as classes: ``data.normal`` selects types (default all), ``data.anomaly`` must be
   omitted, and the defective samples of type ``c`` become class ``"<type> (defect)"``, an
   anomaly class (:func:`as_class_set`). It cannot be mixed with other sets in
   ``data.sources``; ``one-vs-rest`` does not apply.
3. **Test hold-out, before anything else.** The official test split where a data set has
   one, otherwise a seeded class-stratified ``data.test_fraction`` share. Pooled test =
   held-out normals + held-out anomalies, capped at ``data.max_test`` by a seeded
   subsample that keeps the normal/anomaly ratio (``data.test_anomaly_fraction``, when
   given, first sets that ratio by subsampling one side). The rest is the training part.
4. **Server data.** ``data.server_normal`` normal samples of the training part go to
   ``Federation.server_normal`` (never test data).
5. **Partition** the remaining normal training samples over ``partition.clients`` with
   ``partition.scheme`` (see :mod:`fedad.data.partition`); ``by-source`` groups by data set
   and needs at least two (``data.sources``); ``natural`` gives client ``k`` the samples
   of the ``k``-th sorted natural client id (``Dataset.group``: a table's
   ``data.client_column``, an image folder's clients), whose test hold-out (step 3) was
   stratified by client and class. Then cap each client at ``data.max_train_per_client``
   (seeded subsample).
6. **Contamination.** ``round_half_up(contamination * n_k)`` of client ``k``'s samples are
   replaced by anomalies drawn without replacement from the training part's anomalies
   (disjoint from the test anomalies), so every client gets its share; ``y_train`` marks
   them 1.
7. **Local test sets** (``partition.local_test = "shared"``: every client gets the whole
   pooled test set, and pooled metrics are the mean over clients; otherwise, ``"own"``)
   split the pooled test set exactly (disjoint, union = pooled): a test
   normal of class ``c`` goes to client ``k`` with probability proportional to ``k``'s
   training count of ``c`` (uniformly if no client holds ``c``); test anomalies are dealt
   evenly in random order. A client left without a test normal takes one from a client with
   several (preferring its own classes) when possible. Defect sets: the defects of type
   ``c`` are drawn like its test normals (in proportion to the training counts of ``c``),
   so a client is tested on its own types' defects; a client left without a defect takes
   one of its own types' from a client with several; ``data.anomaly_source`` samples are
   dealt evenly.
8. **Encoding** (tables with text columns): each categorical column becomes one 0/1 column
   per category seen in the clients' training rows (:mod:`fedad.data.encoding`).
   **Imputation** (``data.missing = "impute-mean"``): missing values become their feature's
   mean over the clients' training data, in training, test and server data alike.
   **Standardization** (``kind == "vector"`` and ``data.standardize``): z-score with the
   mean and standard deviation of the union of the clients' training data (what a server
   gets from the clients' counts, sums and sums of squares), applied to training, test and
   server data; a zero deviation becomes 1; one-hot columns are left as they are. Images
   stay in [0, 1].

Impossible requests raise a one-line :class:`~fedad.core.errors.FedadError` that names the key.
``Federation.notes`` records sizes and counts (plain ints, floats, strings, lists, dicts).
"""

from __future__ import annotations

from fedad.data.federation.contaminate import mix
from fedad.data.federation.materialize import materialize, pooled_mean_std
from fedad.data.federation.members import as_class_set, parse_source
from fedad.data.federation.plan import STREAMS, FederationPlan, plan_federation, streams
from fedad.data.federation.sections import DataSection, PartitionSpec

__all__ = [
    "STREAMS",
    "DataSection",
    "FederationPlan",
    "PartitionSpec",
    "as_class_set",
    "materialize",
    "mix",
    "parse_source",
    "plan_federation",
    "pooled_mean_std",
    "streams",
]
