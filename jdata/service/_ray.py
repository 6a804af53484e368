"""Starting and joining Ray, the service's transport (imported only by ``jdata.service``).

The embedded default is a local Ray bound to 127.0.0.1 with token
authentication (Ray's default from 2.5x on). Ray resolves "127.0.0.1" to the
machine's external address unless it runs as a single-machine "cluster",
which the ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` switch asks for: then every
server Ray starts listens on loopback only.
"""

from __future__ import annotations

import os
import sys
import warnings

_LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
LOCALHOST = "127.0.0.1"


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
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        warnings.warn("jdata.service: joining a Ray cluster without authentication "
                      "(RAY_AUTH_MODE=disabled): anyone who reaches it can run code in your "
                      "pipelines' workers", stacklevel=3)
    ray.init(address=address, namespace=namespace, **{"log_to_driver": False, **ray_init_kw})
