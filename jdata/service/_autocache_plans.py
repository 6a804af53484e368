"""The dispatcher's autocache bookkeeping, without Ray: per pipeline, how each epoch runs.

``Plans.answer`` is what ``Dispatcher.autocache`` returns to a client for one epoch of a
pipeline with an ``autocache()`` marker: ``{"action": "compute" | "put" | "get",
"point", "reason"}``. In order:

1. a complete cache of an allowed point is read ("get"), whichever job wrote it;
2. a pipeline whose cache could not be written computes from then on;
3. a forced mode is put (then read); with no point allowed, it computes;
4. otherwise the first epoch starts a profile (``start_profile``, on a worker) and
   computes; an epoch after the profile came in (``poll_profile``) follows
   ``autocache.decide``: compute, or put the chosen point.

The clients of one epoch all get the same answer, so a named job's clients run the same
plan. The callables are the dispatcher's: Ray stays there.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from jdata.service import autocache

# How a profile is started and looked at: start_profile(job_fp, plan_ref) -> handle;
# poll_profile(handle) -> None (not yet) or the Profile's fields (or it raises).
StartProfile = Callable[[str, list], object]
PollProfile = Callable[[object], "dict | None"]


class Plans:
    """Autocache entries by pipeline fingerprint (see the module docstring)."""

    def __init__(self, store: str, start_profile: StartProfile, poll_profile: PollProfile):
        self.store = store
        self._start, self._poll = start_profile, poll_profile
        self._entries: dict[str, dict] = {}

    def answer(self, job_fp: str, keys: dict, allowed: dict, forced: str | None,
               plan_ref: list, epoch: int) -> dict:
        """How epoch ``epoch`` of the pipeline ``job_fp`` runs. ``keys``: point -> the
        fingerprint of the prefix that point's cache holds (allowed points only);
        ``allowed``: mode -> None or why it is not allowed; ``forced``: the marker's
        mode."""
        entry = self._entries.setdefault(job_fp, {
            "job": job_fp, "state": "new", "mode": None, "reason": "", "chosen": "",
            "estimates": {}, "profile": None, "keys": keys, "written": None})
        answers = entry.setdefault("_epochs", {})
        if epoch not in answers:
            answers[epoch] = self._answer(entry, keys, allowed, forced, plan_ref)
            entry.update(state=answers[epoch]["action"], reason=answers[epoch]["reason"])
        return dict(answers[epoch])

    def _answer(self, entry: dict, keys: dict, allowed: dict, forced, plan_ref: list) -> dict:
        for point in ("output", "marker"):
            if point in keys and forced in (None, point) and \
                    autocache.read_manifest(self.store, keys[point]) is not None:
                entry["mode"] = point
                return _get(point)
        if entry.get("_failed"):
            return _compute(entry["chosen"])
        if forced is not None:
            decision = autocache.decide(None, allowed, forced)
        elif not keys:  # no point may be cached: nothing to profile
            decision = autocache.Decision("compute", "compute: " + "; ".join(
                why for why in allowed.values() if why), {})
        else:
            decision = entry.get("_decision") or self._decision(entry, allowed, plan_ref)
            if decision is None:
                return _compute(entry["reason"])
        entry.update(_decision=decision, mode=decision.mode, estimates=decision.estimates,
                     chosen=decision.reason)
        if decision.mode == "compute":
            return _compute(decision.reason)
        return {"action": "put", "point": decision.mode, "reason": decision.reason}

    def _decision(self, entry: dict, allowed: dict, plan_ref: list):
        """The profile's decision, once it is in (None until then)."""
        if entry.get("_profiling") is None:
            try:
                entry["_profiling"] = self._start(entry["job"], plan_ref)
            except Exception as e:  # no worker yet: the next epoch tries again
                entry["reason"] = f"compute: cannot profile yet ({e})"
                return None
            entry["reason"] = "compute while a worker profiles the pipeline (epoch 1)"
            return None
        try:
            fields = self._poll(entry["_profiling"])
        except Exception as e:  # the worker died, or the pipeline failed there
            return autocache.Decision(
                "compute", f"compute: profiling failed ({type(e).__name__}: {e})", {})
        if fields is None:
            return None
        profile = autocache.Profile(**fields)
        entry["profile"] = dataclasses.asdict(profile)
        return autocache.decide(profile, allowed)

    def failed(self, job_fp: str, why: str) -> None:
        """A client could not write the cache: the pipeline computes from now on (the
        epochs told to put ask again)."""
        entry = self._entries.get(job_fp)
        if entry is not None:
            reason = f"compute: {why}"
            entry.update(_failed=True, _decision=autocache.Decision("compute", reason, {}),
                         mode="compute", state="compute", reason=why, chosen=reason)
            entry["_epochs"] = {e: a for e, a in entry["_epochs"].items()
                                if a["action"] != "put"}

    def written(self, job_fp: str, point: str, summary: dict) -> None:
        """A client wrote a cache (its parts and manifest)."""
        entry = self._entries.get(job_fp)
        if entry is not None:
            entry["written"] = {"point": point, **summary}

    def status(self) -> list:
        """Each pipeline's public fields (``AutocacheStatus``)."""
        return [{k: v for k, v in entry.items() if not k.startswith("_")}
                for entry in self._entries.values()]


def _get(point: str) -> dict:
    return {"action": "get", "point": point,
            "reason": f"the cache of the {point} is complete: read from it"}


def _compute(reason: str) -> dict:
    return {"action": "compute", "point": None, "reason": reason}
