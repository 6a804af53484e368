"""Starting and joining Ray, the service's transport (imported only by ``jdata.service``).

The embedded default is a local Ray bound to 127.0.0.1 with token
authentication (Ray's default from 2.5x on). Ray resolves "127.0.0.1" to the
machine's external address unless it runs as a single-machine "cluster",
which the ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` switch asks for: then every
server Ray starts listens on loopback only.

Joining a cluster (``init_remote``) fails fast where nothing listens and
warns when the cluster turns out to have no authentication; the command line
sends this machine's token to a loopback address first (``send_local_token``:
Ray itself does so only for ``"auto"``).
"""

from __future__ import annotations

import os
import socket
import sys
import warnings

_LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
LOCALHOST = "127.0.0.1"
_AUTH_MODE = "RAY_AUTH_MODE"
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_CONNECT_TIMEOUT_SEC = 5.0


def ray_module():
    """``import ray``, with a clear error when the extra is missing."""
    if "ray" not in sys.modules:
        # Read by Ray when it is imported: decides whether it binds loopback only.
        os.environ.setdefault(_LOOPBACK_SWITCH, "0")
    try:
        import ray
    except ImportError as e:
        raise ImportError("jdata.service needs Ray: pip install 'jdata[service]'") from e
    return ray


def init_local(namespace: str, **ray_init_kw) -> None:
    """A Ray of this process's own on 127.0.0.1 (never a stale cluster: ``address="local"``)."""
    ray = ray_module()
    if ray.is_initialized():
        return
    from ray._private import ray_constants  # noqa: PLC0415 - see the module docstring

    if ray_constants.ENABLE_RAY_CLUSTER:
        raise RuntimeError(
            f"jdata.service: Ray was imported before jdata.service with {_LOOPBACK_SWITCH} "
            "unset, so an embedded service would listen on the machine's external address; "
            f"set {_LOOPBACK_SWITCH}=0 before importing ray, or start a cluster yourself and "
            "pass its address to service.start(address=...)")
    kw = {"include_dashboard": False, "log_to_driver": False, **ray_init_kw}
    ray.init(address="local", _node_ip_address=LOCALHOST, namespace=namespace, **kw)


def init_remote(address: str, namespace: str, **ray_init_kw) -> None:
    """Joins an existing cluster (``"auto"``, ``"ray://host:10001"``, ``"host:6379"``)."""
    ray = ray_module()
    if ray.is_initialized():
        return
    _check_reachable(address)
    try:
        ray.init(address=address, namespace=namespace, **{"log_to_driver": False, **ray_init_kw})
    except ConnectionError as e:
        sent = ("the token this process sent (RAY_AUTH_TOKEN, else RAY_AUTH_TOKEN_PATH, else "
                "~/.ray/auth_token) may not be the cluster's" if _token_mode() else
                "if the cluster uses token authentication, set RAY_AUTH_MODE=token and its "
                "token in RAY_AUTH_TOKEN")
        raise ConnectionError(f"{e}: {sent}") from e
    if not _token_mode():
        # A cluster with token authentication refuses a client without a token: this one
        # let us in, so anyone who reaches it can.
        warnings.warn(f"jdata.service: the Ray cluster at {address!r} has no authentication: "
                      "anyone who reaches it can run code in your pipelines' workers; start "
                      "it with RAY_AUTH_MODE=token", stacklevel=3)


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
    """Fails fast: ``ray.init`` retries an address where nothing listens for minutes."""
    parsed = _host_port(address)
    if parsed is None:
        return
    try:
        socket.create_connection(parsed, timeout=_CONNECT_TIMEOUT_SEC).close()
    except OSError as e:
        raise ConnectionError(f"jdata.service: no Ray cluster answers at address={address!r} "
                              f"({e}); pass the address the cluster's head prints (or that "
                              "`jdata service start` prints)") from None


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
