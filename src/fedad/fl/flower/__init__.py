"""Flower engine: any registered algorithm on Flower (``flwr``, the ``flower`` extra).

The same :class:`~fedad.core.algorithm.Algorithm` object that the in-process engine runs
runs here, unchanged:

* **Server.** ``algorithm.server(ctx)`` runs inside a Flower ``ServerApp`` with the same
  :class:`~fedad.core.context.ServerContext`; its grid is a
  :class:`~fedad.fl.flower.grid.FlowerGrid`, an adapter that wraps Flower's ``Grid``
  (``get_node_ids``, ``push_messages``/``pull_messages``). The adapter maps Flower node ids
  to our client ids (the node's ``partition-id``, learned by a one-off ``query.fedad_hello``
  handshake), counts bytes exactly as the in-process engine does (:attr:`Message.nbytes
  <fedad.core.messages.Message.nbytes>`), and returns replies keyed and sorted by client id. A
  node whose reply does not come back within ``engine.timeout`` seconds, or that answers
  with an error, is simply missing; a phase in which fewer than ``engine.min_clients`` of
  the addressed nodes answer stops the run with a one-line
  :class:`~fedad.fl.flower.spec.FlowerRunError`.
* **Clients.** One ``ClientApp`` (:mod:`fedad.fl.flower.app`) whose handlers are the
  algorithm's :meth:`~fedad.core.algorithm.Algorithm.handlers`, registered by phase name
  (``train`` -> ``@app.train()``, ``evaluate`` -> ``@app.evaluate()``, any other phase ``p``
  -> ``@app.query("p")``). Client state (a dict of named arrays) lives in Flower's
  ``context.state`` as an ``ArrayRecord``. A SuperNode builds its data with
  :func:`fedad.federation.build_federation` from the run's config and seed and takes
  client ``partition-id`` of its ``node_config``.
* **SecAgg+.** With ``privacy.secagg`` a phase the program runs through
  :meth:`ServerContext.mean <fedad.core.context.ServerContext.mean>` becomes one run of
  Flower's SecAgg+ workflow (:meth:`FlowerGrid.secure_mean
  <fedad.fl.flower.grid.FlowerGrid.secure_mean>`, :mod:`fedad.fl.flower.secagg`).
* **Messages** convert losslessly to ``RecordDict``: arrays in an ``ArrayRecord``
  (``fedad.arrays``, serialised with ``numpy.save``: dtype, shape and bytes exact), scalars
  in a ``ConfigRecord`` (``fedad.scalars``: bool, int, float and str keep their type), the
  phase name and transport facts in a second ``ConfigRecord`` (``fedad.meta``, not counted
  as payload).

**How the run reaches the nodes.** The run's config travels as Flower *run config*
(:class:`~fedad.fl.flower.spec.RunSpec`): the validated experiment config as JSON (an exact
pydantic round trip), the method's name, detector, parameters and setup as JSON, and the
engine settings. Run config is what Flower already ships with every run to every SuperNode,
on any machine, so a SuperNode needs no shared file system and no restart between runs;
``node_config`` keeps only what is node-specific (``partition-id``, ``num-partitions``).

**Engines.** ``flower-simulation`` (:mod:`fedad.fl.flower.sim`) runs Flower's simulation
runtime with Ray in this process; ``flower-deployment`` (:mod:`fedad.fl.flower.deploy`)
starts a SuperLink, one SuperNode per client and a SuperExec as real processes on
127.0.0.1 (or uses a remote SuperLink, see ``docs/deployment.md``).

**Modules, by job.** :mod:`~fedad.fl.flower.run` (:func:`~fedad.fl.flower.run.run_flower`,
the entry point), :mod:`~fedad.fl.flower.spec` (:class:`~fedad.fl.flower.spec.RunSpec`,
whether flwr is installed), :mod:`~fedad.fl.flower.codec` (messages <-> ``RecordDict``),
:mod:`~fedad.fl.flower.grid` (the Grid adapter), :mod:`~fedad.fl.flower.server` (the
ServerApp's work), :mod:`~fedad.fl.flower.results` (the results hand-off),
:mod:`~fedad.fl.flower.app` (the ``ClientApp`` and ``ServerApp``),
:mod:`~fedad.fl.flower.secagg` (SecAgg+), :mod:`~fedad.fl.flower.sim` and
:mod:`~fedad.fl.flower.deploy` (the two engines), :mod:`~fedad.fl.flower.worker` (a
SuperNode's long-running ClientApp process) and :mod:`~fedad.fl.flower.internals`, the one
module that imports Flower's non-public names (checked against the supported flwr version
when imported). ``run``, ``spec``, ``results`` and ``deploy`` import without ``flwr``;
``codec`` and ``grid`` import it only where a record is built."""
