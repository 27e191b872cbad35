"""The HTTP server of a participant: routes, bearer tokens of both planes,
TLS, the ready file, and the command line of a participant program.

start(envs, ...) serves in a background thread and returns a Running;
serve(envs, ...) blocks until SIGTERM or Ctrl-C; main(envs) reads the same
flags as bin/envserver and serves.
"""

import argparse
import hashlib
import hmac
import json
import os
import signal
import ssl
import sys
import threading
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import wire
from .control import ControlPlane
from .environment import check_environment
from .sessions import DEFAULT_RETIRED_SESSIONS, OPERATE, START, VERIFY, DataPlane
from .wire import refuse

DEFAULT_LISTEN = "127.0.0.1:8091"
DEFAULT_NAME = "python-participant"


class Participant:
    """Both planes of one participant, and the routes that reach them."""

    def __init__(self, envs, name, data_token, control_token, retired_cap=DEFAULT_RETIRED_SESSIONS):
        self.data = DataPlane(envs, retired_cap)
        self.control = ControlPlane(self.data, name)
        self.data_token = _sum(data_token) if data_token else None
        self.control_token = _sum(control_token) if control_token else None

    def data_route(self, method, parts, body):
        """Answers a data-plane request (authenticated already)."""
        dp = self.data
        if method == "GET" and parts == ["v1", "envs"]:
            return dp.specs
        if method == "GET" and parts == ["v1", "stats"]:
            return dp.stats()
        if method == "POST" and parts == ["v1", "sessions"]:
            return dp.mutate(START, None, body)
        if len(parts) == 3 and parts[:2] == ["v1", "sessions"] and parts[2] and method == "GET":
            return self._counted(dp.session_info, parts[2])
        if len(parts) == 4 and parts[:2] == ["v1", "sessions"] and parts[2] and method == "POST" and parts[3] in ("operate", "verify"):
            return dp.mutate(OPERATE if parts[3] == "operate" else VERIFY, parts[2], body)
        return self._counted(_not_found, method, parts)

    def _counted(self, fn, *args):
        try:
            return fn(*args)
        except wire.ProtocolError as e:
            self.data.count(e)
            raise

    def control_route(self, method, parts, body):
        """Answers a control-plane request (authenticated already)."""
        c = self.control
        routes = {("GET", "capabilities"): c.capabilities, ("GET", "status"): c.status,
                  ("POST", "prepare"): c.prepare, ("POST", "commit"): c.commit, ("POST", "restore"): c.restore,
                  ("POST", "resume"): c.resume, ("POST", "retire"): c.retire}
        if len(parts) == 3 and (method, parts[2]) in routes:
            return routes[(method, parts[2])](body())
        if method == "POST" and len(parts) == 5 and parts[2] == "sessions" and parts[3] and parts[4] == "authorise":
            return c.authorise(parts[3], body())
        return _not_found(method, parts)

    def authorize(self, plane, header):
        """Raises unauthorized (or control_disabled) unless header carries
        the plane's bearer token. Digests are compared in constant time, so
        neither the token nor its length leaks."""
        want = self.control_token if plane == "control" else self.data_token
        if plane == "control" and want is None:
            raise refuse("control_disabled", "the checkpoint control plane is off: no control token is configured "
                                             "(--control-token or $TURNSTILE_CONTROL_TOKEN)")
        if plane == "data" and want is None:
            return  # --insecure-no-data-auth
        scheme, _, token = (header or "").partition(" ")
        if scheme != "Bearer" or not hmac.compare_digest(_sum(token), want):
            raise refuse("unauthorized", f"missing or wrong bearer token for the {plane} plane")


def _sum(token):
    return hashlib.sha256(token.encode("utf-8")).digest()


def _not_found(method, parts):
    raise refuse("not_found", f"no route {method} /{'/'.join(parts)}")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "turnstile-python-participant"
    # Headers and body go out in two writes; with Nagle's algorithm the
    # second waits for the client's delayed ACK (~40 ms a request).
    disable_nagle_algorithm = True
    # An idle keep-alive connection holds a thread; close it after a while.
    timeout = 300
    participant = None  # set by start()

    def setup(self):
        super().setup()
        if isinstance(self.request, ssl.SSLSocket):
            # The TLS handshake runs here, in the connection's thread, not in
            # the accept loop, so a slow client stalls only itself.
            self.request.do_handshake()

    def do_GET(self):
        self._handle()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    def _handle(self):
        raw_path = urllib.parse.urlsplit(self.path).path
        parts = [urllib.parse.unquote(p) for p in raw_path.split("/")[1:]]
        method = "GET" if self.command == "HEAD" else self.command
        self._body_read = False
        plane = "data"
        try:
            if method == "GET" and parts == ["healthz"]:
                return self._send(200, wire.dumps({"ok": True}))
            plane = "control" if parts[:2] == ["v1", "control"] else "data"
            self.participant.authorize(plane, self.headers.get("Authorization"))
            route = self.participant.control_route if plane == "control" else self.participant.data_route
            out = route(method, parts, self._read_body)
            # Mutations answer with the exact bytes their receipt stores.
            self._send(200, out if isinstance(out, bytes) else wire.dumps(out))
        except wire.ProtocolError as e:
            extra = {}
            if e.code == "unauthorized":
                extra["WWW-Authenticate"] = f'Bearer realm="turnstile-{plane}"'
            self._send(e.status, e.body(), extra)
        except Exception as e:  # the participant itself failed: 500, nothing else is claimed
            traceback.print_exc(file=sys.stderr)
            self._send(500, wire.ProtocolError("internal", f"{type(e).__name__}: {e}").body())

    def _read_body(self):
        self._body_read = True
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        n = int(self.headers.get("Content-Length") or 0)
        if n > wire.MAX_BODY_BYTES:
            self._body_read = False
            raise refuse("malformed_request", f"read request body: more than {wire.MAX_BODY_BYTES} bytes")
        return self.rfile.read(n)

    def _read_chunked(self):
        out = bytearray()
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            if len(out) + size > wire.MAX_BODY_BYTES:
                self._body_read = False
                raise refuse("malformed_request", f"read request body: more than {wire.MAX_BODY_BYTES} bytes")
            out += self.rfile.read(size)
            self.rfile.readline()

    def _send(self, status, body, headers=None):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        unread = self.command in ("POST", "PUT", "PATCH") and not self._body_read
        if unread:  # a body left unread would be taken for the next request
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, fmt, *args):
        if os.environ.get("TURNSTILE_LOG_LEVEL") == "debug":
            log("debug", "request", line=fmt % args)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A failed connection (a refused TLS handshake, a client gone) is
        # one log line, not a traceback.
        log("warn", "connection failed", client=str(client_address[0]), error=str(sys.exc_info()[1]))


def log(level, msg, **fields):
    print(json.dumps(dict({"level": level, "msg": msg}, **fields)), file=sys.stderr, flush=True)


def write_ready_file(path, text):
    """Writes the base URL atomically: a harness polling the file never
    reads half of it."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class TLS:
    """TLS of a participant: serve HTTPS with cert (a PEM certificate chain)
    and key (its PEM private key); with client_ca, require client
    certificates signed by that CA (mutual TLS). TLS 1.2 or later."""

    def __init__(self, cert, key, client_ca=None):
        if not cert or not key:
            raise ValueError("TLS needs both a certificate and its key")
        self.cert, self.key, self.client_ca = cert, key, client_ca or None

    def context(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert, self.key)
        if self.client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(self.client_ca)
        return ctx


class Running:
    """A participant serving in a background thread. url is its base URL
    (http:// or https://); participant holds both planes (for tests)."""

    def __init__(self, httpd, participant, url):
        self.httpd, self.participant, self.url = httpd, participant, url
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def shutdown(self):
        """Stops serving and closes the listening socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()

    def wait(self):
        """Blocks until shutdown() is called (from another thread)."""
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()


def check_tokens(data_token, control_token, insecure_no_data_auth=False):
    """Raises ValueError unless the tokens make a safe configuration: a data
    token (or insecure_no_data_auth), no surrounding whitespace, and two
    different tokens. No control token turns the control plane off."""
    for what, tok in (("data token", data_token), ("control token", control_token)):
        if tok and tok != tok.strip():
            raise ValueError(f"the {what} has leading or trailing whitespace")
    if not data_token and not insecure_no_data_auth:
        raise ValueError("no data token; give one, or insecure_no_data_auth for local development")
    if data_token and data_token == control_token:
        raise ValueError("the data token and the control token must differ")


def start(envs, host="127.0.0.1", port=0, *, name=DEFAULT_NAME, data_token=None, control_token=None, tls=None,
          insecure_no_data_auth=False, retired_sessions=DEFAULT_RETIRED_SESSIONS, ready_file=None, quiet=False):
    """Starts a participant hosting envs (Environment instances) on
    host:port (port 0 picks a free one) in a background thread, and returns
    its Running once it listens.

    data_token guards /v1/... (required unless insecure_no_data_auth);
    control_token guards /v1/control/... (None turns the checkpoint control
    plane off: it answers 404 control_disabled); tls is a TLS or None; name
    is reported in capabilities and written into checkpoints (a restore
    checks it); retired_sessions is how many verified sessions keep their
    receipts; ready_file, if given, receives the base URL atomically once
    the server listens; quiet leaves out the JSON line on stderr that says
    so. Raises ValueError on a bad configuration, before anything
    listens."""
    envs = list(envs)
    if not envs:
        raise ValueError("a participant needs at least one environment")
    names = [check_environment(e)["name"] for e in envs]
    if len(set(names)) != len(names):
        raise ValueError(f"environment names must be unique, got {names}")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("the participant needs a name")
    if not isinstance(retired_sessions, int) or retired_sessions < 1:
        raise ValueError(f"retired_sessions must be a positive integer, not {retired_sessions!r}")
    check_tokens(data_token, control_token, insecure_no_data_auth)
    participant = Participant(envs, name, data_token or None, control_token or None, retired_sessions)
    handler = type("BoundHandler", (Handler,), {"participant": participant})
    httpd = Server((host, port), handler)
    scheme = "http"
    if tls is not None:
        try:
            httpd.socket = tls.context().wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        except Exception:
            httpd.server_close()
            raise
        scheme = "https"
    bound_host, bound_port = httpd.server_address[:2]
    url = f"{scheme}://{bound_host}:{bound_port}"
    if ready_file:
        try:
            write_ready_file(ready_file, url)
        except OSError:
            httpd.server_close()
            raise
    if not quiet:
        log("info", "participant listening", url=url, name=name, envs=names,
            control_plane=bool(control_token), data_auth=bool(data_token))
    return Running(httpd, participant, url)


def serve(envs, host="127.0.0.1", port=0, **kwargs):
    """Serves envs until SIGTERM or Ctrl-C (the arguments are start()'s);
    returns 0 once shut down. Call it from the main thread."""
    running = start(envs, host, port, **kwargs)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    log("info", "participant shutting down")
    running.shutdown()
    return 0


def parse_args(envs, argv, prog=None):
    """The participant command line: returns (start()'s keyword arguments,
    the environments to host); a bad flag exits 2 naming it."""
    known = {e.name: e for e in envs}
    p = argparse.ArgumentParser(prog=prog, description="A turnstile participant: the environments "
                                f"{', '.join(sorted(known))} behind the participant protocol.")
    p.add_argument("--listen", default=os.environ.get("TURNSTILE_ENV_LISTEN") or DEFAULT_LISTEN,
                   help="address to listen on, HOST:PORT (port 0 picks a free port); default from $TURNSTILE_ENV_LISTEN")
    p.add_argument("--ready-file", default="", help="once listening, atomically write the base URL to this file")
    p.add_argument("--name", default=DEFAULT_NAME, help="participant name reported by the control plane and written into checkpoints")
    p.add_argument("--envs", default=",".join(sorted(known)), help="environments to host, comma-separated (known: %(default)s)")
    p.add_argument("--data-token", default=os.environ.get("TURNSTILE_DATA_TOKEN", ""),
                   help="bearer token of the data plane; default from $TURNSTILE_DATA_TOKEN")
    p.add_argument("--control-token", default=os.environ.get("TURNSTILE_CONTROL_TOKEN", ""),
                   help="bearer token of the control plane; empty turns it off; default from $TURNSTILE_CONTROL_TOKEN")
    p.add_argument("--insecure-no-data-auth", action="store_true", help="serve the data plane without a token (local development only)")
    p.add_argument("--retired-sessions", type=int, default=DEFAULT_RETIRED_SESSIONS,
                   help="verified sessions that keep their receipts (default %(default)s)")
    p.add_argument("--tls-cert", default=os.environ.get("TURNSTILE_TLS_CERT", ""),
                   help="serve HTTPS with this certificate chain (PEM); default from $TURNSTILE_TLS_CERT")
    p.add_argument("--tls-key", default=os.environ.get("TURNSTILE_TLS_KEY", ""),
                   help="private key of --tls-cert (PEM); default from $TURNSTILE_TLS_KEY")
    p.add_argument("--tls-client-ca", default=os.environ.get("TURNSTILE_TLS_CLIENT_CA", ""),
                   help="require client certificates signed by this CA (mutual TLS); default from $TURNSTILE_TLS_CLIENT_CA")
    a = p.parse_args(argv)
    host, sep, port = a.listen.rpartition(":")
    if not sep or not port.isdigit():
        p.error(f"--listen {a.listen!r}: want HOST:PORT")
    try:
        check_tokens(a.data_token, a.control_token, a.insecure_no_data_auth)
    except ValueError as e:
        p.error(f"{e} (--data-token/$TURNSTILE_DATA_TOKEN, --control-token/$TURNSTILE_CONTROL_TOKEN, --insecure-no-data-auth)")
    chosen = []
    for n in [x.strip() for x in a.envs.split(",") if x.strip()]:
        if n not in known:
            p.error(f"--envs: unknown environment {n!r} (known: {', '.join(sorted(known))})")
        if known[n] not in chosen:
            chosen.append(known[n])
    if bool(a.tls_cert) != bool(a.tls_key) or (a.tls_client_ca and not a.tls_cert):
        p.error("--tls-cert and --tls-key go together, and --tls-client-ca needs them")
    if not chosen or not a.name.strip() or a.retired_sessions < 1:
        p.error("--envs, --name and --retired-sessions need a value")
    kwargs = {"host": host.strip("[]") or "127.0.0.1", "port": int(port), "name": a.name, "data_token": a.data_token,
              "control_token": a.control_token, "insecure_no_data_auth": a.insecure_no_data_auth,
              "retired_sessions": a.retired_sessions, "ready_file": a.ready_file,
              "tls": TLS(a.tls_cert, a.tls_key, a.tls_client_ca) if a.tls_cert else None}
    return kwargs, chosen


def main(envs, argv=None, prog=None):
    """A participant program: reads the command line (argv, default
    sys.argv[1:]; flags as bin/envserver's, tokens from
    $TURNSTILE_DATA_TOKEN / $TURNSTILE_CONTROL_TOKEN by default), hosts the
    chosen envs and serves until SIGTERM. Returns the exit code."""
    kwargs, chosen = parse_args(envs, sys.argv[1:] if argv is None else argv, prog)
    return serve(chosen, **kwargs)
