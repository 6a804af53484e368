"""Notebook views (``_repr_html_``) of a ``Service`` and its ``ServiceStatus``: tables of
the address, the workers, the jobs and the journal. Every value is escaped (job names,
error texts and paths come from users and from other processes)."""

from __future__ import annotations

import html


def _table(caption: str, header: tuple, rows: list) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in rows)
    return (f"<table><caption style='text-align:left'><b>{html.escape(caption)}</b></caption>"
            f"<tr>{head}</tr>{body}</table>")


def status_html(status) -> str:
    """The status as tables: the dispatcher and journal, the workers, the jobs."""
    d, j = status.dispatcher, status.journal
    about = [("dispatcher", f"pid {d.pid} on node {d.node_id}, {d.memory_bytes / 1e6:,.0f} MB")]
    if j is not None:
        about.append(("journal", f"{j.path}: {j.file_bytes / 1e6:,.2f} MB, {j.compactions} "
                      "compactions" + ("" if j.writable else f"; CANNOT WRITE: {j.error}")))
    if status.autoscaler is not None:
        a = status.autoscaler
        about.append(("autoscaler", f"{a.target} workers ({a.phase}; within "
                      f"[{a.min_workers}, {a.max_workers}]), {len(a.draining)} draining"))
    about += [(f"monitor error ({n}x)", e) for e, n in status.monitor_errors.items()]
    workers = [(w.worker_id, w.state, w.pid, w.active, w.tasks, f"{w.elements_per_sec:,.0f}",
                f"{w.bytes_per_sec / 1e6:,.1f}", f"{w.busy:.0%}", f"{w.load:.2f}")
               for w in status.workers]
    jobs = [(j.job_id, j.name or "", j.mode, j.epoch, f"{j.done}/{j.num_splits}", j.clients,
             f"{j.elements:,}", f"{j.elements_per_sec:,.0f}", f"{j.wait_fraction:.0%}")
            for j in status.jobs]
    return "".join((
        _table("status", ("", ""), about),
        _table(f"{len(workers)} workers", ("worker", "state", "pid", "reads running",
                                           "reads", "elements/s", "MB/s", "busy", "load"),
               workers),
        _table(f"{len(jobs)} jobs", ("job", "name", "mode", "epoch", "splits done",
                                     "clients", "elements", "elements/s", "waiting"), jobs)))


def service_html(ref, status=None, error: str | None = None) -> str:
    """The service's address and namespace above its status (or why there is none)."""
    address = ref.address or "this process's Ray"
    top = _table("jdata service", ("address", "namespace"), [(address, ref.namespace)])
    if status is None:
        return top + f"<p>status unavailable: {html.escape(str(error))}</p>"
    return top + status_html(status)
