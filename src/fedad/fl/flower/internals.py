"""Every non-public ``flwr`` name fedad uses, in one place, checked when it is imported.

Flower's public API (``flwr.app``, ``flwr.clientapp``, ``flwr.serverapp``,
``flwr.simulation``, ``flwr.common``, ``flwr.server``, ``flwr.server.strategy``,
``flwr.server.workflow``, ``flwr.client.mod``: the names in their ``__all__``) is imported
where it is used. What fedad needs beyond it is imported here and nowhere else in
``src/``:

* the ClientApp process of a SuperNode (:mod:`fedad.fl.flower.worker`) re-implements
  Flower's task loop of ``flwr-clientapp`` (``flwr.supernode.runtime.run_clientapp``): the
  runtime's protobuf requests and serde, the inflatable-object helpers, the task heartbeat,
  the HTTP client and its interceptors;
* SecAgg+ (:mod:`fedad.fl.flower.secagg`, :mod:`fedad.core.secagg`): the record keys and
  stages of ``secaggplus_mod``, the workflow's state and constants, the legacy
  ``RecordDict`` conversions, and the quantisation arithmetic that fedad reproduces to
  check a secure mean against the clear one.

These names change between Flower releases, which is why ``flwr`` is pinned to one
release line (:data:`SUPPORTED_FLWR`). With another release that lacks one of them, importing
this module raises a one-line :class:`FlowerVersionError` naming the supported version
and the missing name, not an ``ImportError`` traceback.
"""

from __future__ import annotations

import re
from importlib import metadata

from fedad.core.errors import FedadError

SUPPORTED_FLWR = "1.41"
"""The flwr release line whose internals are imported here (pyproject: ``flwr>=1.41,<1.42``)."""


class FlowerVersionError(FedadError):
    """The installed ``flwr`` lacks a name that fedad's Flower engine uses."""


def installed_flwr() -> str:
    """The installed flwr's version, or ``'(not installed)'``."""
    try:
        return metadata.version("flwr")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def unsupported(err: ImportError) -> FlowerVersionError:
    """The one-line error for a name that this flwr does not have."""
    name = re.search(r"cannot import name '([^']+)'", str(err))
    missing = f"{err.name}.{name.group(1)}" if name else f"the module {err.name}"
    return FlowerVersionError(
        f"fedad's Flower engine supports flwr {SUPPORTED_FLWR}.x; the installed flwr "
        f"{installed_flwr()} lacks {missing}",
        f"install flwr {SUPPORTED_FLWR}: pip install 'flwr>={SUPPORTED_FLWR},<1.42'",
    )


try:
    from flwr.common.config import get_fab_config
    from flwr.common.constant import ErrorCode, SubStatus
    from flwr.common.secure_aggregation.ndarrays_arithmetic import (
        factor_combine,
        factor_extract,
        parameters_multiply,
    )
    from flwr.common.secure_aggregation.quantization import dequantize, quantize
    from flwr.common.secure_aggregation.secaggplus_constants import (
        RECORD_KEY_CONFIGS,
        Stage,
    )
    from flwr.common.secure_aggregation.secaggplus_constants import Key as SecAggPlusKey
    from flwr.common.serde import context_from_proto, fab_from_proto, run_from_proto
    from flwr.compat.common import recorddict_compat
    from flwr.proto.node_pb2 import Node
    from flwr.proto.runtime_pb2 import (
        AcquireTaskRequest,
        PullAppMessagesRequest,
        PullTaskInputRequest,
        SendTaskHeartbeatRequest,
    )
    from flwr.server.client_proxy import ClientProxy
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.constant import Key as WorkflowKey
    from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState
    from flwr.supercore.constant import TaskType
    from flwr.supercore.fab import Fab
    from flwr.supercore.heartbeat import HeartbeatSender
    from flwr.supercore.inflatable.inflatable_protobuf_utils import (
        make_confirm_message_received_fn_protobuf,
        make_pull_object_fn_protobuf,
    )
    from flwr.supercore.inflatable.inflatable_utils import pull_and_inflate_object_from_tree
    from flwr.supercore.interceptors import (
        RuntimeTokenHttpInterceptor,
        RuntimeVersionHttpInterceptor,
    )
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.run import Run
    from flwr.supercore.runtime import RuntimeHttpClient
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.supernode.runtime.run_clientapp import push_message, push_task_output
except ImportError as err:
    raise unsupported(err) from None

__all__ = [
    "MAIN_CONFIGS_RECORD",
    "MAIN_PARAMS_RECORD",
    "RECORD_KEY_CONFIGS",
    "AcquireTaskRequest",
    "ClientProxy",
    "ErrorCode",
    "Fab",
    "HeartbeatSender",
    "Node",
    "PullAppMessagesRequest",
    "PullTaskInputRequest",
    "Run",
    "RuntimeHttpClient",
    "RuntimeTokenHttpInterceptor",
    "RuntimeVersionHttpInterceptor",
    "SecAggPlusKey",
    "SendTaskHeartbeatRequest",
    "Stage",
    "SubStatus",
    "TaskIdentity",
    "TaskType",
    "WorkflowKey",
    "WorkflowState",
    "context_from_proto",
    "dequantize",
    "fab_from_proto",
    "factor_combine",
    "factor_extract",
    "get_fab_config",
    "make_confirm_message_received_fn_protobuf",
    "make_pull_object_fn_protobuf",
    "make_simple_http_retry_invoker",
    "parameters_multiply",
    "pull_and_inflate_object_from_tree",
    "push_message",
    "push_task_output",
    "quantize",
    "recorddict_compat",
    "run_from_proto",
]
