"""OpenLineage test helpers: a client writing events to a file, reading them back, and
validation against the vendored spec (`openlineage_spec/`) and provrepo's own facet schema,
offline: the event as a RunEvent, then every facet against the schema its `_schemaURL` names
(a facet whose schema is not known fails)."""

from __future__ import annotations

import json
import os
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from openlineage.client import OpenLineageClient
from openlineage.client.transport.file import FileConfig, FileTransport
from referencing import Registry, Resource

from agent._openlineage import facet_schema_path

SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openlineage_spec")
RUN_EVENT = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"


def _registry() -> Registry:
    paths = [os.path.join(SPEC, "OpenLineage.json"), facet_schema_path()]
    facets = os.path.join(SPEC, "facets")
    paths += [os.path.join(facets, f) for f in sorted(os.listdir(facets))]
    resources = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            doc = json.load(f)
        resources.append((doc["$id"], Resource.from_contents(doc)))
    return Registry().with_resources(resources)


REGISTRY = _registry()


def _check(instance: Any, ref: str) -> None:
    Draft202012Validator({"$ref": ref}, registry=REGISTRY, format_checker=FormatChecker()).validate(
        instance
    )


def facets_of(event: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, facet) of every facet in a RunEvent: run, job, and datasets'."""
    out = list(event["run"].get("facets", {}).items()) + list(
        event["job"].get("facets", {}).items()
    )
    for ds in event.get("inputs", []) + event.get("outputs", []):
        for key in ("facets", "inputFacets", "outputFacets"):
            out += list(ds.get(key, {}).items())
    return out


def validate_event(event: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError unless `event` and each of its facets is valid."""
    _check(event, RUN_EVENT)
    known = {str(uri) for uri in REGISTRY}
    for name, facet in facets_of(event):
        url = facet["_schemaURL"]
        base = url.split("#", 1)[0]
        assert base in known, f"facet {name}: no vendored schema for {url}"
        _check(facet, url)


def file_client(path: str | os.PathLike[str]) -> OpenLineageClient:
    """The official client with its file transport: one JSON event a line in `path`."""
    return OpenLineageClient(transport=FileTransport(FileConfig(str(path), append=True)))


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]
