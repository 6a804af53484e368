"""Notebook views of a service and its status (``_repr_html_``), without Ray."""

from __future__ import annotations

from jdata.service import Service, ServiceStatus
from jdata.service._status import JobStatus, JournalStatus, ProcessInfo, WorkerStatus
from jdata.service.client import ServiceRef

_EVIL = "<script>alert('x')</script>"


def _status() -> ServiceStatus:
    workers = [WorkerStatus("worker-1", 4242, "node-a", tasks=7, active=2,
                            elements_per_sec=1234.0, busy=0.62, load=1.55),
               WorkerStatus("worker-2", None, None, "starting")]
    jobs = [JobStatus("job-9", _EVIL, 3, "dynamic", 10, 4, 2, 0, 1, elements=5000)]
    journal = JournalStatus(f"/tmp/{_EVIL}/journal.db", 2_000_000, 1000, 500, 3)
    return ServiceStatus(ProcessInfo(99, "node-a", 50_000_000), workers, jobs,
                         journal=journal, monitor_errors={_EVIL: 2})


def test_a_status_is_tables_of_its_workers_jobs_and_journal_all_escaped():
    view = _status()._repr_html_()
    assert "<table>" in view and "2 workers" in view and "1 jobs" in view
    for cell in ("worker-1", "4242", "62%", "1.55", "starting", "job-9", "dynamic", "4/10",
                 "5,000", "pid 99 on node node-a", "journal.db"):
        assert f"{cell}</td>" in view or f"{cell}," in view or f"{cell}:" in view, cell
    assert _EVIL not in view and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in view


def test_a_service_shows_its_address_and_says_why_it_has_no_status():
    svc = Service(None, ServiceRef(f"127.0.0.1:1{_EVIL}", "jdata-ns", 10), owned=False)
    view = svc._repr_html_()  # never started: its status() fails, the view says so
    assert "<td>jdata-ns</td>" in view and "127.0.0.1:1&lt;script&gt;" in view
    assert "status unavailable: AttributeError" in view and _EVIL not in view
