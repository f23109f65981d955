"""OpenLineage RunEvents for every captured action, linking dataset-level lineage to provrepo's
record-level lineage through a custom run facet, `provrepo_recordLineage`.

Each action is an OpenLineage run of the job `<job>.<output component>` (job: the Spark app's
name unless set): START before it, COMPLETE or FAIL after it, with one run id. Inputs are the
files its sources read (`inputStatistics`: records read), outputs the files it wrote
(`outputStatistics`); the facet names the repository, the provrepo run, the event-id range, the
capture points with their record counts, the culprits (inputs whose processing raised) and
how to trace a record. A FAIL event also carries an `errorMessage` facet. All actions of one
`LineageContext` share a parent run (the `parent` facet).

Events are sent by the official client (`openlineage-python`, the `provrepo[openlineage]`
extra), configured the standard way: `OPENLINEAGE_URL`, `OPENLINEAGE_CONFIG`, an
`openlineage.yml` in the working directory or `~/.openlineage/`, or `OPENLINEAGE__TRANSPORT__*`
variables; with none of them (or `OPENLINEAGE_DISABLED=true`) nothing is sent. Emission stays
off the task path: the action only hands a snapshot to one background thread, which waits for
the action's lineage to be merged (for the counts), builds the events and sends them. A
transport error is logged once per context (later ones at debug level) and never reaches the
job. Pending events are sent before the repository closes and at interpreter exit.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import logging
import os
import queue
import re
import shlex
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, ClassVar

from repository import ProvenanceRepository

from ._planner import ActionInfo

log = logging.getLogger("provrepo.agent")

FACET_NAME = "provrepo_recordLineage"
FACET_VERSION = "1-0-0"
SCHEMA_FILE = "ProvrepoRecordLineageRunFacet.json"
SCHEMA_ID = f"urn:provrepo:spec:facets:{FACET_VERSION}:{SCHEMA_FILE}"
SCHEMA_URL = f"{SCHEMA_ID}#/$defs/ProvrepoRecordLineageRunFacet"
_FLUSH_AT_EXIT = 10.0  # seconds given to pending events at interpreter exit or close


def _version() -> str:
    try:
        return importlib.metadata.version("provrepo")
    except importlib.metadata.PackageNotFoundError:
        return "0"


PRODUCER = f"urn:provrepo:{_version()}"  # provrepo has no home page: a versioned name


def facet_schema_path() -> str:
    """Where the facet's JSON schema (draft 2020-12, `$id` = `SCHEMA_ID`) is installed."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas", SCHEMA_FILE)


def openlineage_configured() -> bool:
    """Whether OpenLineage is configured the standard way (see the module doc)."""
    env = os.environ
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OPENLINEAGE_URL") or any(k.startswith("OPENLINEAGE__TRANSPORT") for k in env):
        return True
    paths = [
        env.get("OPENLINEAGE_CONFIG") or "",
        os.path.join(os.getcwd(), "openlineage.yml"),
        os.path.join(os.path.expanduser("~/.openlineage"), "openlineage.yml"),
    ]
    return any(p and os.path.isfile(p) for p in paths)


def client_from_environment() -> Any | None:
    """An `OpenLineageClient` configured the standard way, or None when OpenLineage is not
    configured (or its client is not installed: said once, as a warning)."""
    if not openlineage_configured():
        return None
    try:
        from openlineage.client import OpenLineageClient
    except ImportError:
        log.warning(
            "OpenLineage is configured but its client is not installed: "
            "pip install 'provrepo[openlineage]' to send events"
        )
        return None
    return OpenLineageClient()


# -- the background sender -----------------------------------------------------------------------


class _Sender:
    """One daemon thread that runs submitted jobs in order (shared by every emitter)."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[Callable[[], None]] = queue.Queue()
        self._cv = threading.Condition()
        self._pending = 0
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], None]) -> None:
        with self._cv:
            self._pending += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="provrepo-openlineage", daemon=True
                )
                self._thread.start()
        self._jobs.put(job)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:  # the jobs handle their errors; this is the last guard
                log.exception("OpenLineage emission failed")
            finally:
                with self._cv:
                    self._pending -= 1
                    self._cv.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted job has run; False on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: self._pending == 0, timeout)


_SENDER = _Sender()
atexit.register(_SENDER.flush, _FLUSH_AT_EXIT)


# -- the emitter ----------------------------------------------------------------------------------


class OpenLineageEmitter:
    """An action listener (see `agent._planner`) that sends OpenLineage RunEvents through
    `client` (anything with `emit(event)`: an `OpenLineageClient`)."""

    def __init__(
        self,
        client: Any,
        repo: ProvenanceRepository,
        *,
        app: str,
        namespace: str | None = None,
        job_name: str | None = None,
    ) -> None:
        from openlineage.client.generated import parent_run  # the extra: fail now if missing

        self.client = client
        self.repo = repo
        self.namespace = namespace or os.environ.get("OPENLINEAGE_NAMESPACE") or "default"
        self.job_name = job_name or _job_name(app)
        self.repository_uri = "file://" + os.path.abspath(repo.path)
        self.emitted = 0
        self.failed = 0
        self.cpu_seconds = 0.0  # spent building and sending, on the sender thread
        self._warned = False
        self._runs: dict[tuple[int, int], str] = {}
        self._lock = threading.Lock()
        # Every action is a run of its own job; all of them are children of this context's run.
        self.parent_run_id = str(_uuid())
        self._parent = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=self.parent_run_id),
            job=parent_run.Job(namespace=self.namespace, name=self.job_name),
            producer=PRODUCER,
        )
        repo.add_close_listener(self.flush)

    # -- the planner's hooks (on the action path: hand over and return) -------------------------

    def action_started(self, info: ActionInfo) -> None:
        run_id = str(_uuid())
        with self._lock:
            self._runs[(info.output.number, info.started_ns)] = run_id
        _SENDER.submit(lambda: self._send(info, run_id))

    def action_ended(self, info: ActionInfo) -> None:
        with self._lock:
            run_id = self._runs.pop((info.output.number, info.started_ns), None)
        if run_id is None:  # started before this listener was added
            return
        _SENDER.submit(lambda: self._send(info, run_id))

    def flush(self, timeout: float | None = _FLUSH_AT_EXIT) -> bool:
        """Wait until the events of every action so far are sent (or failed); False on
        timeout."""
        return _SENDER.flush(timeout)

    # -- building and sending (on the sender thread) ---------------------------------------------

    def _send(self, info: ActionInfo, run_id: str) -> None:
        t = time.thread_time()
        try:
            self._build_and_emit(info, run_id)
        finally:
            self.cpu_seconds += time.thread_time() - t

    def _build_and_emit(self, info: ActionInfo, run_id: str) -> None:
        try:
            event = self.build(info, run_id)
        except Exception:
            log.exception("building the OpenLineage event of %s failed", info.output.component_id)
            self.failed += 1
            return
        try:
            self.client.emit(event)
            self.emitted += 1
        except Exception as e:
            self.failed += 1
            if not self._warned:
                self._warned = True
                log.warning(
                    "OpenLineage events are not getting through (%s: %s); the job goes on, "
                    "later failures are logged at debug level",
                    type(e).__name__,
                    e,
                )
            else:
                log.debug("OpenLineage event not sent: %s", e)

    def build(self, info: ActionInfo, run_id: str) -> Any:
        """The RunEvent of `info`: START if it has not ended, else COMPLETE or FAIL."""
        from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
        from openlineage.client.generated import error_message_run, job_type_job

        ended = info.ended_ns is not None
        counts: dict[int, int] = {}
        first_last: tuple[int, int] | None = None
        culprits: int | None = None
        if ended:
            counts, first_last, culprits = self._measure(info)
        state = RunState.START
        run_facets: dict[str, Any] = {"parent": self._parent}
        if ended:
            state = RunState.FAIL if info.error is not None else RunState.COMPLETE
        if info.error is not None:
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=f"{type(info.error).__name__}: {info.error}"[:4000],
                programmingLanguage="python",
                stackTrace=_stack(info.error),
                producer=PRODUCER,
            )
        run_facets[FACET_NAME] = self._facet(info, counts, first_last, culprits)
        job = Job(
            namespace=self.namespace,
            name=f"{self.job_name}.{_safe(info.output.component_id)}",
            facets={
                "jobType": job_type_job.JobTypeJobFacet(
                    processingType="BATCH", integration="SPARK", jobType="JOB", producer=PRODUCER
                )
            },
        )
        when = info.ended_ns if ended else info.started_ns
        return RunEvent(
            eventType=state,
            eventTime=_iso(when or time.time_ns()),
            run=Run(runId=run_id, facets=run_facets),
            job=job,
            inputs=self._inputs(info, counts if ended else None),
            outputs=self._outputs(info, counts if ended else None),
            producer=PRODUCER,
        )

    def _measure(self, info: ActionInfo) -> tuple[dict[int, int], tuple[int, int] | None, int]:
        """Records per capture point, the run's event-id range, and the culprits of this
        action's capture points, once the action's lineage is merged (the lookup merges it)."""
        run = self.repo.lineage.run_info(info.run_id)
        counts = {n: cp.records for n, cp in run.capture_points.items()}
        mine = {c["cp"] for c in info.capture_points}
        culprits = sum(1 for c in self.repo.culprits(info.run_id) if c.capture_point in mine)
        return counts, (run.first_event_id, run.last_event_id), culprits

    def _facet(
        self,
        info: ActionInfo,
        counts: dict[int, int],
        first_last: tuple[int, int] | None,
        culprits: int | None,
    ) -> Any:
        cps = []
        for c in info.capture_points:
            entry = {
                "capturePoint": c["cp"],
                "componentId": c["component_id"],
                "componentType": c["component_type"],
                "eventType": c["event_type"],
                "dependency": c["dependency"],
                "parents": list(c["parents"]),
            }
            if c["cp"] in counts:
                entry["records"] = counts[c["cp"]]
            cps.append(entry)
        repo = shlex.quote(self.repo.path)
        return RecordLineageRunFacet(
            repository=self.repository_uri,
            runId=info.run_id,
            action=info.output.component_type,
            outputCapturePoint=info.output.number,
            capturePoints=cps,
            traceCommand=f"provrepo trace {repo} RECORD --run {shlex.quote(info.run_id)}",
            eventIds=None
            if first_last is None
            else {"first": first_last[0], "last": first_last[1]},
            culprits=culprits,
            producer=PRODUCER,
        )

    def _inputs(self, info: ActionInfo, counts: dict[int, int] | None) -> list[Any]:
        from openlineage.client.event_v2 import InputDataset
        from openlineage.client.generated import input_statistics_input_dataset as stats

        out = []
        for c in info.sources():
            name = _dataset_name(c)
            if name is None:
                continue  # a driver collection (parallelize): not a dataset
            facets: dict[str, Any] = {}
            if counts is not None and c["cp"] in counts:
                files = c.get("files")
                facets["inputStatistics"] = stats.InputStatisticsInputDatasetFacet(
                    rowCount=counts[c["cp"]],
                    fileCount=len(files) if isinstance(files, list) else None,
                    producer=PRODUCER,
                )
            out.append(InputDataset(namespace="file", name=name, inputFacets=facets))
        return out

    def _outputs(self, info: ActionInfo, counts: dict[int, int] | None) -> list[Any]:
        from openlineage.client.event_v2 import OutputDataset
        from openlineage.client.generated import output_statistics_output_dataset as stats

        out_cp = next(c for c in info.capture_points if c["cp"] == info.output.number)
        name = _dataset_name(out_cp)
        if name is None:
            return []  # returned to the driver (collect, count, take)
        facets: dict[str, Any] = {}
        if counts is not None and out_cp["cp"] in counts:
            facets["outputStatistics"] = stats.OutputStatisticsOutputDatasetFacet(
                rowCount=counts[out_cp["cp"]], producer=PRODUCER
            )
        return [OutputDataset(namespace="file", name=name, outputFacets=facets)]


def _facet_class() -> type:
    import attr
    from openlineage.client.generated.base import RunFacet

    @attr.define
    class ProvrepoRecordLineageRunFacet(RunFacet):
        """provrepo's record-level lineage of one action (schema: `facet_schema_path()`;
        camelCase fields, as OpenLineage facets have)."""

        repository: str
        runId: str
        action: str
        outputCapturePoint: int
        capturePoints: list[dict[str, Any]]
        traceCommand: str
        eventIds: dict[str, int] | None = attr.field(default=None)
        culprits: int | None = attr.field(default=None)
        _additional_skip_redact: ClassVar[list[str]] = [
            "repository",
            "runId",
            "action",
            "outputCapturePoint",
            "capturePoints",
            "traceCommand",
            "eventIds",
            "culprits",
        ]

        @staticmethod
        def _get_schema() -> str:
            return SCHEMA_URL

    return ProvrepoRecordLineageRunFacet


class _LazyFacet:
    """The facet class, defined on first use (the client is an optional extra)."""

    _cls: type | None = None

    def __call__(self, **kwargs: Any) -> Any:
        if self._cls is None:
            self._cls = _facet_class()
        return self._cls(**kwargs)


RecordLineageRunFacet = _LazyFacet()


def _dataset_name(cp: dict[str, Any]) -> str | None:
    """The file or directory a capture point read or wrote (a single file by its own name)."""
    files = cp.get("files")
    if isinstance(files, list) and len(files) == 1:
        return os.path.abspath(str(files[0]))
    path = cp.get("path")
    if not path:
        return None
    path = str(path)
    return os.path.abspath(path[len("file://") :] if path.startswith("file://") else path)


def _job_name(app: str) -> str:
    return _safe(app) or "provrepo"


def _safe(name: str) -> str:
    """A job-name part: letters, digits, '_', '-' and '.' ("collect#5" -> "collect_5")."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).isoformat(timespec="microseconds")


def _stack(error: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(type(error), error, error.__traceback__))[-8000:]


def _uuid() -> uuid.UUID:
    from openlineage.client.uuid import generate_new_uuid

    return generate_new_uuid()
