"""The client protocol's version, checked when a process joins a service.

A client and a dispatcher of different jdata versions may disagree on the
messages between them (their fields, the dispatcher's methods), and Ray then
fails deep inside a call (``TypeError: too many positional arguments``) naming
neither side. The dispatcher reports ``Dispatcher.version()``; a joining
process (``service.start`` finding a dispatcher, ``service.connect``, the
command line, an iterator's transport) compares it with its own and stops with
one ``ServiceVersionError`` naming both versions.

``PROTOCOL_VERSION`` changes whenever a message, a dispatcher or worker method
or their arguments change incompatibly; jdata releases that keep it can mix.
"""

from __future__ import annotations

PROTOCOL_VERSION = 1
# A dispatcher answers this fast (it has nothing to compute): past it, the check gives up.
_ASK_TIMEOUT_SEC = 30.0


def reported() -> dict:
    """What this jdata speaks, as ``Dispatcher.version()`` reports it."""
    import jdata

    return {"jdata": jdata.__version__, "protocol": PROTOCOL_VERSION}


def check(ray, dispatcher, where: str, what: str) -> dict:
    """The dispatcher's ``version()``; a ``ServiceVersionError`` when its protocol is not
    this jdata's (also when the dispatcher is too old to have ``version``).

    ``where`` says which service (its address and namespace), ``what`` who asks
    (``"service.connect"``) for the message.
    """
    try:
        theirs = ray.get(dispatcher.version.remote(), timeout=_ASK_TIMEOUT_SEC)
    except AttributeError:  # the handle knows the actor's methods: it has no version()
        theirs = None
    except ray.exceptions.RayTaskError as e:  # a method Ray did not know was missing
        if not isinstance(getattr(e, "cause", None), AttributeError):
            raise
        theirs = None
    if theirs is None or theirs.get("protocol") != PROTOCOL_VERSION:
        raise _mismatch(theirs, where, what)
    return theirs


def _mismatch(theirs: dict | None, where: str, what: str):
    from jdata._errors import ServiceVersionError

    ours = reported()
    if theirs is None:
        speaks, fix = ("an older protocol, from before versions were checked (a jdata "
                       f"older than {ours['jdata']}, or a build of it)"), "jdata version"
    else:
        speaks = f"protocol {theirs.get('protocol')} (jdata {theirs.get('jdata')})"
        fix = f"jdata {theirs.get('jdata')}"
    return ServiceVersionError(
        f"{what}: this jdata speaks protocol {ours['protocol']} (jdata {ours['jdata']}); the "
        f"service at {where} speaks {speaks}: install the service's {fix} where this "
        f"process runs, or restart the service with this one (jdata {ours['jdata']})")
