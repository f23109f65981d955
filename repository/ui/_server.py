"""The UI's HTTP server: GET only, the packaged page and the JSON API, nothing else.

The standard library's ThreadingHTTPServer is enough for a read-only, GET-only API used by
one person's browser; it needs no dependency. Defences, as a server holding provenance data
(raw input lines) must have them even on loopback:

- binds 127.0.0.1 unless told otherwise; there is no authentication;
- the `Host` header must name the bound address (DNS rebinding: a page from another site
  whose name was re-pointed at 127.0.0.1 sends its own name), or `localhost` on loopback, or
  an IP literal when bound to every interface;
- static files come from a table of the packaged folder made at start: a request path is
  looked up as it is, never joined to a directory, so `..`, `%2e%2e` and the like find
  nothing;
- every answer carries a Content-Security-Policy with no inline script, and the page puts
  record data into the DOM as text only.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from .. import BadInput, NotFound, ProvenanceRepository
from ._api import Api

log = logging.getLogger("provrepo.ui")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".svg": "image/svg+xml",
}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
_COMMON_HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def static_files() -> dict[str, tuple[bytes, str]]:
    """URL path -> (content, content type) for every file of the packaged `static` folder."""
    out: dict[str, tuple[bytes, str]] = {}
    root = resources.files(__package__) / "static"

    def walk(node, prefix: str) -> None:
        for child in node.iterdir():
            if child.is_dir():
                walk(child, f"{prefix}{child.name}/")
                continue
            suffix = "." + child.name.rsplit(".", 1)[-1] if "." in child.name else ""
            if suffix in _TYPES:
                out[f"/static/{prefix}{child.name}"] = (child.read_bytes(), _TYPES[suffix])

    walk(root, "")
    out["/"] = out["/static/index.html"]
    return out


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::", "[::]")


def _ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
        return True
    except ValueError:
        return False


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _HTTPServer6(_HTTPServer):
    address_family = socket.AF_INET6


class UiServer:
    """The provenance UI over one repository: `url`, `serve_forever()` or `start()` (a
    background thread), `close()`. Opens its own read-only view of the repository, so it
    never writes and works beside the process that owns it."""

    def __init__(
        self,
        repo: str | ProvenanceRepository,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
    ) -> None:
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise BadInput(f"port must be 0..65535, got {port!r}")
        path = repo.path if isinstance(repo, ProvenanceRepository) else repo
        self.repo = ProvenanceRepository.open(path, read_only=True)
        self.api = Api(self.repo)
        self.host = host
        self._static = static_files()
        server_cls = _HTTPServer6 if ":" in host.strip("[]") else _HTTPServer
        try:
            self.httpd = server_cls((host.strip("[]"), port), self._handler())
        except OSError as e:
            self.repo.close()
            raise BadInput(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
        self.port = self.httpd.server_address[1]
        self._allowed = self._allowed_hosts()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = self.host if not _is_wildcard(self.host) else socket.gethostname()
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}/"

    def _allowed_hosts(self) -> set[str]:
        names = {self.host.lower()}
        if ":" in self.host and not self.host.startswith("["):
            names.add(f"[{self.host.lower()}]")
        if is_loopback(self.host):
            names |= {"localhost", "127.0.0.1", "[::1]"}
        if _is_wildcard(self.host):
            names |= {socket.gethostname().lower(), socket.getfqdn().lower(), "localhost"}
        return names

    def host_allowed(self, header: str | None) -> bool:
        """Whether a request's Host header names this server (DNS-rebinding defence)."""
        if not header:
            return False
        header = header.strip().lower()
        if header.startswith("["):
            name, _, rest = header.partition("]")
            name += "]"
            port = rest[1:] if rest.startswith(":") else ""
        else:
            name, _, port = header.rpartition(":") if ":" in header else (header, "", "")
        if port != str(self.port) and not (port == "" and self.port == 80):
            return False
        return name in self._allowed or (_is_wildcard(self.host) and _ip_literal(name))

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.25)

    def start(self) -> UiServer:
        """Serve in a daemon thread (for a notebook or a driver beside its job)."""
        self._thread = threading.Thread(target=self.serve_forever, name="provrepo-ui", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
            self._thread = None
        self.httpd.server_close()
        self.repo.close()

    def __enter__(self) -> UiServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"UiServer({self.repo.path!r}, {self.url})"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        ui = self

        class Handler(_Handler):
            server_ui = ui

        return Handler


class _Handler(BaseHTTPRequestHandler):
    server_ui: UiServer
    protocol_version = "HTTP/1.1"
    server_version = "provrepo-ui"
    sys_version = ""
    timeout = 60
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stall

    def do_GET(self) -> None:
        ui = self.server_ui
        if not ui.host_allowed(self.headers.get("Host")):
            self._json(
                HTTPStatus.FORBIDDEN,
                {"error": "Host header does not name this server (DNS rebinding defence)"},
            )
            return
        target = self.path
        if not target.startswith("/"):
            self._json(HTTPStatus.BAD_REQUEST, {"error": "request target must be a path"})
            return
        path, _, query = target.partition("?")
        if path.startswith("/api/") or path == "/api":
            self._api(path, query)
            return
        found = ui._static.get(path)
        if found is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {path[:200]}"})
            return
        body, ctype = found
        self._send(HTTPStatus.OK, body, ctype, {"Cache-Control": "no-cache"})

    def _api(self, path: str, query: str) -> None:
        try:
            params = parse_qs(query, keep_blank_values=True, strict_parsing=False)
            answer: Any = self.server_ui.api.route(path, params)
            status = HTTPStatus.OK
        except NotFound as e:
            status, answer = HTTPStatus.NOT_FOUND, {"error": _one_line(e)}
        except BadInput as e:
            status, answer = HTTPStatus.BAD_REQUEST, {"error": _one_line(e)}
        except UnicodeError as e:
            status, answer = HTTPStatus.BAD_REQUEST, {"error": f"bad encoding: {e}"}
        except Exception as e:  # a bug: say so in one line, log the traceback
            log.exception("UI API %s failed", path)
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            answer = {"error": f"internal error: {type(e).__name__}: {_one_line(e)}"}
        self._json(status, answer)

    def _json(self, status: HTTPStatus, data: Any, close: bool = False) -> None:
        body = json.dumps(data, ensure_ascii=False, allow_nan=False, default=str).encode()
        extra = {"Cache-Control": "no-store"}
        if status == HTTPStatus.METHOD_NOT_ALLOWED:
            extra["Allow"] = "GET"
        self._send(status, body, "application/json; charset=utf-8", extra, close)

    def _send(
        self, status: HTTPStatus, body: bytes, ctype: str, extra: dict[str, str], close=False
    ) -> None:
        self.send_response(status)
        for k, v in {**_COMMON_HEADERS, **extra}.items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _not_allowed(self) -> None:
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED, f"{self.command} is not allowed: GET only")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _not_allowed
    do_TRACE = do_CONNECT = _not_allowed

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        """Every error the standard library raises (malformed request lines, unknown
        methods) as one JSON line, like the API's."""
        try:
            status = HTTPStatus(code)
        except ValueError:
            status = HTTPStatus.BAD_REQUEST
        if status == HTTPStatus.NOT_IMPLEMENTED:  # an unknown method
            status = HTTPStatus.METHOD_NOT_ALLOWED
            message = f"{self.command} is not allowed: GET only"
        self._json(status, {"error": message or status.phrase}, close=True)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)


def _one_line(e: BaseException) -> str:
    return " ".join((str(e) or type(e).__name__).split())


def serve_ui(repo: str | ProvenanceRepository, host: str = DEFAULT_HOST, port: int = 0) -> UiServer:
    """Start the UI in a background thread, for a notebook or a driver beside its job:
    `serve_ui(repo).url`, then `.close()`. It opens its own read-only view of the repository
    (so it never writes, and works beside the owner); `port=0` picks a free port."""
    return UiServer(repo, host, port).start()


def serve(
    repo: str | ProvenanceRepository,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    out=None,
) -> int:
    """Serve until interrupted (Ctrl-C): prints the URL on one line first, warns on stderr
    when listening beyond loopback (there is no authentication). Returns 0."""
    server = UiServer(repo, host, port)
    if not is_loopback(host):
        print(
            f"provrepo: warning: serving on {host}, beyond loopback: anyone who can reach "
            "this port can read the repository (there is no authentication)",
            file=sys.stderr,
        )
    print(server.url, file=out or sys.stdout, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0
