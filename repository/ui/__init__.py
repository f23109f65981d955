"""The provenance UI: a read-only web page and JSON API over a repository.

`provrepo ui REPO`, or `serve_ui(repo)` beside a live job (a notebook, the driver); see
`UiServer`. Front-end files
(the page, Cytoscape.js and cytoscape-dagre, with their licenses) are packaged in `static/`.
"""

from ._api import Api
from ._graph import GraphRequest, TraceGraphs
from ._server import DEFAULT_HOST, DEFAULT_PORT, UiServer, is_loopback, serve, serve_ui

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "Api",
    "GraphRequest",
    "TraceGraphs",
    "UiServer",
    "is_loopback",
    "serve",
    "serve_ui",
]
