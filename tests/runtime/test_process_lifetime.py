"""How long process-engine workers and threads live: never longer than their owners,
never cut short by anyone else, and stopped in bounded time."""

from __future__ import annotations

from tests.runtime.process_helpers import run_script, write_script


def test_a_hung_udf_on_threads_does_not_block_interpreter_exit(tmp_path):
    script = write_script(tmp_path, """
        import threading
        import jdata

        def hang_on_3(x):
            if x == 3:
                threading.Event().wait()
            return x

        it = iter(jdata.range(100).map(hang_on_3, num_parallel_calls=2))
        print([int(next(it)) for _ in range(2)], flush=True)
    """)
    result = run_script(script)  # it used to run into the timeout, joining the hung thread
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "[0, 1]"
