"""``engine.name = "flower-deployment"``: a real Flower deployment, processes and all.

``fedad run`` with this engine starts, on 127.0.0.1 with free ports and ``--insecure``:

* one **SuperLink** (``flower-superlink --isolation process``),
* one **SuperNode** per client (``flower-supernode --node-config "partition-id=I
  num-partitions=N"``; each runs the ClientApp in a fresh process per message),
* one **SuperExec** (``flower-superexec``) that runs the ServerApp of our run,

then submits the run with ``flwr run`` (a Flower App Bundle whose components are
``fedad.fl.flower.app:server_app`` and ``:client_app`` and whose run config is the
:class:`~fedad.fl.flower.spec.RunSpec`), waits, reads the results and stops every process it
started — on success, on failure and on Ctrl-C or SIGTERM (process groups, then the whole
process tree found under ``/proc``, SIGTERM then SIGKILL; a second Ctrl-C meanwhile waits).

**Nothing outlives fedad.** Every child starts in its own session with a parent-death signal
(Linux ``PR_SET_PDEATHSIG`` = SIGKILL), and carries ``FEDAD_FLOWER_OWNER`` in its
environment, which Flower's own children (a SuperNode's SuperExec, the ``flwr-clientapp``
and ``flwr-serverapp`` processes) inherit along with the process group. A small reaper
process per :class:`~fedad.fl.flower.deploy.processes.Supervisor` holds a pipe from fedad;
when fedad dies in any way, even by SIGKILL, the pipe closes and the reaper SIGKILLs those
process groups and every process with the marker. The parent-death signal fires when the
*thread* that started the child exits: the thread that starts the processes is the one that
waits for them and stops them (:func:`~fedad.fl.flower.deploy.run.run_deployment`,
:func:`fedad.cli.flower.run_foreground`), so it outlives them.

**Console.** A SuperNode that exits or is stopped (SIGSTOP) during a run is logged as a
warning naming its client (= partition id), and so are the ServerApp's own warnings (``node
2: no reply to 'train' within 30 s``), relayed through ``warnings.jsonl``. A port taken at
start-up is retried on another port; the error names the port. After Ctrl-C or SIGTERM the
kept work directory is logged (``interrupted; Flower logs kept in DIR``) and the interrupt
goes on to the caller.

**How results come back.** The SuperLink runs with ``--isolation process``, so the ServerApp
is run by *our* SuperExec, on the machine that submitted the run. The ServerApp writes into
the results directory named in the run config (:class:`~fedad.fl.flower.
results.ResultsDir`): ``rounds.jsonl`` as rounds end (read live for progress and
``on_round``), then ``arrays.npz`` + ``outcome.json``, or ``error.json``. The same holds
with a remote SuperLink (``fedad flower run``,
:func:`~fedad.fl.flower.deploy.run.remote_superlink`): only the SuperExec and the ServerApp
run locally, so the results land locally too.

Every Flower process gets its own ``FLWR_HOME`` under the work directory
(``RUN_DIR/.flower/METHOD-XXXX/``: logs, homes, the app, the results hand-over and a data
cache for the SuperNodes), telemetry and update checks off, and runtime dependency
installation off. The work directory is removed after a successful run and kept (its path
in the error) after a failed one.

**Personalised detectors stay on the nodes.** Each SuperNode gets a models directory
(``fedad-models-dir`` in its node config; ``fedad flower supernode --models-dir``) where it
saves its own detector; the evaluate reply carries only the scores and the folder's path
(:func:`fedad.fl.flower.app.keep_detector_home`), and metrics.json's ``events`` name each
folder. The local SuperNodes of ``fedad run`` share ``RUN_DIR/.flower/node-models/``, which
stays after the run.

**Modules.** :mod:`~fedad.fl.flower.deploy.processes` (starting, watching and stopping
processes; the reaper), :mod:`~fedad.fl.flower.deploy.launch` (binaries, environment,
ports, TLS options, command lines, the app bundle), :mod:`~fedad.fl.flower.deploy.auth`
(SuperNode authentication: key pairs, registering keys with a SuperLink, a refused
SuperNode's one-line error), :mod:`~fedad.fl.flower.deploy.local`
(:class:`~fedad.fl.flower.deploy.local.LocalDeployment`) and
:mod:`~fedad.fl.flower.deploy.run` (submitting a run and reading its results).
"""
