"""Admission: which job a registering client joins, at which epoch, under whose plan.

- An anonymous job (no ``job_name``) is the client's own: a new job each time,
  at the client's epoch (the dataset's Nth iterator runs epoch N).
- A named job is shared: the job, not the dataset object, owns the epoch and
  the plan. A client joins the name's latest epoch while it is unfinished,
  else the next epoch starts. The first client's plan (how the job is cut) is
  the job's; the others adopt it, so every client reads the same units.
- A restore (``Register.resume``) joins the state's epoch of the name (or a
  new job of its own, anonymous), created from the state if it is gone; its
  lineage takes over what its earlier incarnation held (``Job.restore``).
  ``exact_only`` (a paused client coming back) refuses, changing nothing, when
  another client took some of its units meanwhile.
- A name runs one pipeline at a time: another pipeline under it is refused
  while the name has clients, and replaces the name's jobs once it has none.
- ``off``, ``shared`` and ``coordinated`` jobs have one slot per worker alive
  when the job starts (at least one), unless a restored state says how many.

Pure: the dispatcher passes the ids and the time, applies what comes back.
"""

from __future__ import annotations

import copy

from jdata.service import _policies
from jdata.service._messages import Conflict, JobPlan, Mode, Register, Registered
from jdata.service._updates import ClientJoined, ClientRestored, JobCreated


def admit(state, request: Register, *, now: float, job_id: str, client_id: str,
          client_timeout: float) -> tuple[list, Registered]:
    """The updates that admit ``request`` and the reply (``ValueError`` if refused)."""
    updates: list = []
    found, epoch = _find(state, request, updates)
    if found is not None:
        plan = _plan_of(state.spec(found))
        _check_same(state.spec(found), request, plan)
        job_id = found
    else:
        plan = _new_plan(state, request)
        if plan is None:
            return [], Registered(None, None, epoch, None, client_timeout, need_plan=True)
        updates.append(JobCreated(job_id=job_id, name=request.name,
                                  fingerprint=request.fingerprint, epoch=epoch,
                                  mode=request.mode, num_units=plan.num_units,
                                  split_elements=plan.split_elements))
    resume = request.resume
    again = state.ledger(found).live.get(request.lineage) if found is not None else None
    if resume is None and again is not None:
        # A retried call whose reply was lost (the dispatcher killed after it journaled
        # the join): the same client, as the lineage is the reader's own.
        return [], Registered(job_id, again, epoch, plan, client_timeout)
    if resume is None:
        updates.append(ClientJoined(job_id=job_id, client_id=client_id,
                                    lineage=request.lineage, time=now))
        return updates, Registered(job_id, client_id, epoch, plan, client_timeout)
    position = resume.position
    committed = resume.committed
    if request.exact_only and found is not None:
        trial = copy.deepcopy(state.ledger(found))  # a paused client's rare path
        conflicts, _ = trial.restore(client_id, request.lineage, now, position.wants(),
                                     None if committed is None else committed.wants())
        if conflicts:
            units = ", ".join(str(unit) for unit, _ in conflicts[:8])
            return [], Registered(None, None, epoch, plan, client_timeout, tuple(
                Conflict(unit, where) for unit, where in conflicts),
                refused=f"other consumers took units {units} meanwhile")
    updates.append(ClientRestored(job_id=job_id, client_id=client_id, lineage=request.lineage,
                                  time=now, position=position, committed=committed))
    return updates, Registered(job_id, client_id, epoch, plan, client_timeout)


def _find(state, request: Register, updates: list) -> tuple[str | None, int]:
    """The job to join (None: a new one) and its epoch; ``JobRemoved`` for the jobs of
    another pipeline under the name, once it has no client."""
    name, resume = request.name, request.resume
    if name is None:
        return None, resume.epoch if resume is not None else request.epoch
    named = state.named(name)
    if named and state.spec(named[-1]).fingerprint != request.fingerprint:
        busy = [j for j in named if state.clients(j)]
        if busy:
            raise ValueError(f"job_name={name!r} runs another pipeline, with clients now (its "
                             f"fingerprint is {state.spec(busy[0]).fingerprint!r}, this one "
                             f"{request.fingerprint!r}); give this pipeline another job name")
        for job_id in named:
            updates += _policies.removal(state.spec(job_id))
        named = []
    if resume is not None:
        return (state.find_job(name, resume.epoch) if named else None), resume.epoch
    latest = state.latest_epoch(name)
    found = state.find_job(name, latest) if named and latest is not None else None
    if found is not None and not state.ledger(found).units.finished():
        return found, latest
    return None, 0 if latest is None else latest + 1


def _plan_of(spec) -> JobPlan:
    return JobPlan(spec.num_units, spec.split_elements)


def _check_same(spec, request: Register, plan: JobPlan) -> None:
    if spec.mode != request.mode:
        raise ValueError(f"job_name={spec.name!r} is running with processing mode "
                         f"{spec.mode.value!r}; this client asks for {request.mode.value!r}: "
                         "name another job")
    if request.resume is not None and request.plan is not None and request.plan != plan:
        raise ValueError(f"job_name={spec.name!r} epoch {spec.epoch} is cut into "
                         f"{plan.num_units} units of {plan.split_elements} elements; the "
                         f"state was taken from {request.plan.num_units} of "
                         f"{request.plan.split_elements}: restore it with the service and "
                         "split_elements it was taken with")


def _new_plan(state, request: Register) -> JobPlan | None:
    if request.plan is not None:
        return request.plan
    if request.mode in (Mode.DYNAMIC, Mode.STATIC):
        return None
    return JobPlan(max(1, len(state.alive_workers())))
