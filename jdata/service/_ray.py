"""Starting and joining Ray, the service's transport (imported only by ``jdata.service``).

The embedded default is a local Ray bound to 127.0.0.1 with token
authentication (Ray's default from 2.5x on). Ray resolves "127.0.0.1" to the
machine's external address unless it runs as a single-machine "cluster",
which the ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` switch asks for: then every
server Ray starts listens on loopback only.

Joining a cluster (``init_remote``) fails fast where nothing, or something
other than Ray, listens (``ray.init`` would retry for minutes) and warns when
the cluster turns out to have no authentication; the command line
sends this machine's token to a loopback address first (``send_local_token``:
Ray itself does so only for ``"auto"``).
"""

from __future__ import annotations

import os
import socket
import sys
import warnings
from types import ModuleType

from jdata._extras import require

_LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
LOCALHOST = "127.0.0.1"
_AUTH_MODE = "RAY_AUTH_MODE"
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_CONNECT_TIMEOUT_SEC = 5.0
# The HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, or its
# client server behind ray://) answers with a SETTINGS frame of its own at once.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_HTTP2_FRAME_HEADER = 9  # bytes; the frame's type is its fourth
_SETTINGS_FRAME = 4
_TLS = "RAY_USE_TLS"
_JAX_FORK_WARNING = r"os\.fork\(\) was called"  # JAX's at-fork hook (jax._src.xla_bridge)


def ray_module() -> ModuleType:
    """``import ray``, with a clear error when the extra is missing."""
    if "ray" not in sys.modules:
        # Read by Ray when it is imported: decides whether it binds loopback only.
        os.environ.setdefault(_LOOPBACK_SWITCH, "0")
    return require("ray", "jdata.service")


def init_local(namespace: str, **ray_init_kw) -> None:
    """A Ray of this process's own on 127.0.0.1 (never a stale cluster: ``address="local"``)."""
    ray = ray_module()
    if ray.is_initialized():
        _ignored(ray_init_kw)
        return
    from ray._private import ray_constants  # noqa: PLC0415 - see the module docstring

    if ray_constants.ENABLE_RAY_CLUSTER:
        from jdata._errors import ServiceStartError

        raise ServiceStartError(
            f"jdata.service: Ray was imported before jdata.service with {_LOOPBACK_SWITCH} "
            "unset, so an embedded service would listen on the machine's external address; "
            f"set {_LOOPBACK_SWITCH}=0 before importing ray, or start a cluster yourself and "
            "pass its address to service.start(address=...)")
    kw = {"include_dashboard": False, "log_to_driver": False, **ray_init_kw}
    with warnings.catch_warnings():
        # Ray starts its servers with a ``preexec_fn``, so CPython runs the at-fork hooks,
        # and where JAX runs in this process its hook warns of a deadlock. That child
        # only blocks SIGINT, sets its parent-death signal and execs Ray's binary: it never
        # waits on a lock of JAX's threads, so there is nothing to warn the user of.
        warnings.filterwarnings("ignore", message=_JAX_FORK_WARNING, category=RuntimeWarning)
        ray.init(address="local", _node_ip_address=LOCALHOST, namespace=namespace, **kw)


def _ignored(ray_init_kw: dict) -> None:
    """Ray runs in this process already: arguments for ``ray.init`` (a ``runtime_env`` that
    ships code to the workers...) cannot apply, and saying nothing would hide it."""
    if ray_init_kw:
        warnings.warn(f"jdata.service: Ray already runs in this process, so {sorted(ray_init_kw)}"
                      " for ray.init are not applied; pass them where Ray is first started "
                      "(ray.init, or the first service.start/connect of the process)",
                      stacklevel=4)


def init_remote(address: str, namespace: str, **ray_init_kw) -> None:
    """Joins an existing cluster (``"auto"``, ``"ray://host:10001"``, ``"host:6379"``)."""
    ray = ray_module()
    if ray.is_initialized():
        _ignored(ray_init_kw)
        return
    _check_reachable(address)
    try:
        ray.init(address=address, namespace=namespace, **{"log_to_driver": False, **ray_init_kw})
    except ConnectionError as e:
        from jdata._errors import ServiceConnectionError

        sent = ("the token this process sent (RAY_AUTH_TOKEN, else RAY_AUTH_TOKEN_PATH, else "
                "~/.ray/auth_token) may not be the cluster's" if _token_mode() else
                "if the cluster uses token authentication, set RAY_AUTH_MODE=token and its "
                "token in RAY_AUTH_TOKEN")
        raise ServiceConnectionError(f"{e}: {sent}") from e
    if not _token_mode():
        # A cluster with token authentication refuses a client without a token: this one
        # let us in, so anyone who reaches it can.
        warnings.warn(f"jdata.service: the Ray cluster at {address!r} has no authentication: "
                      "anyone who reaches it can run code in your pipelines' workers; start "
                      "it with RAY_AUTH_MODE=token", stacklevel=3)


def describe(address: str | None, namespace: str) -> str:
    """Which service, for messages: its address (this process's cluster's GCS when it
    joined none by address) and namespace."""
    if address is None or address == "auto":
        ray = ray_module()
        if ray.is_initialized():
            address = ray.get_runtime_context().gcs_address
    return f"{address or 'this process'} (namespace {namespace!r})"


def _token_mode() -> bool:
    return os.environ.get(_AUTH_MODE, "").lower() == "token"


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``"host:port"`` or ``"ray://host:port"``; None for "auto"."""
    hostport = address.removeprefix("ray://").rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _is_loopback(address: str) -> bool:
    parsed = _host_port(address)
    return parsed is not None and parsed[0] in _LOOPBACK_HOSTS


def _check_reachable(address: str) -> None:
    """Fails fast: ``ray.init`` retries an address where nothing listens for minutes, and
    waits as long on one where something else (a web server, a silent port) listens."""
    from jdata._errors import ServiceConnectionError

    parsed = _host_port(address)
    if parsed is None:
        return
    try:
        sock = socket.create_connection(parsed, timeout=_CONNECT_TIMEOUT_SEC)
    except OSError as e:
        raise ServiceConnectionError(
            f"jdata.service: no Ray cluster answers at address={address!r} ({e}); pass the "
            "address the cluster's head prints (or that `jdata service start` prints)") from None
    with sock:
        if _tls():
            return  # a TLS cluster answers only a TLS handshake: Ray's own init checks it
        answer = _http2_answer(sock)
    if len(answer) < _HTTP2_FRAME_HEADER or answer[3] != _SETTINGS_FRAME:
        said = f"answered {answer[:24]!r}" if answer else \
            f"gave no answer within {_CONNECT_TIMEOUT_SEC:g} s"
        raise ServiceConnectionError(
            f"jdata.service: something listens at address={address!r} but it is not a Ray "
            f"cluster (it {said}, where Ray answers at once); pass the address the cluster's "
            "head prints (or that `jdata service start` prints: the GCS's host:port)")


def _tls() -> bool:
    return os.environ.get(_TLS, "").lower() in ("1", "true")


def _http2_answer(sock: socket.socket) -> bytes:
    """The first bytes the server sends after an HTTP/2 preface (fewer when it closes or
    stays silent for ``_CONNECT_TIMEOUT_SEC``)."""
    answer = b""
    try:
        sock.sendall(_HTTP2_PREFACE)
        while len(answer) < _HTTP2_FRAME_HEADER:
            chunk = sock.recv(64)  # more than a header: what a web server says, to show
            if not chunk:
                break
            answer += chunk
    except OSError:  # silent past the timeout, or reset: no answer as Ray's
        pass
    return answer


def send_local_token(address: str | None) -> None:
    """Before joining ``address``: send this machine's Ray token if it is a loopback
    address (the command line, whose second process joins a service started here).

    Not done by ``init_remote`` itself: sent to a loopback cluster without
    authentication (``ray.cluster_utils`` clusters), it made reads hang.
    """
    if address is not None and _is_loopback(address):
        _send_local_token()


def _send_local_token() -> None:
    """Sends this machine's Ray token to a loopback cluster, as Ray does for ``"auto"``.

    Ray enables token authentication on a client by itself only when it finds the
    cluster on its own (``address="auto"``); with an explicit address it connects
    without a token unless RAY_AUTH_MODE=token is set, and the embedded service
    (token auth on) refuses it. A loopback cluster is this machine's, so its
    token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) is the one
    to send; a remote cluster's token must be set explicitly.
    """
    if _AUTH_MODE in os.environ:
        return
    ray_module()  # the loopback switch first: Ray reads it once, at its import
    from ray._private.authentication import authentication_token_setup as setup  # noqa: PLC0415

    setup.maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
