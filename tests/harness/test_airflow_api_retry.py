"""The REST client of the test stack against an api-server that answers "not now".

Airflow 3 on SQLite answers POST /backfills with 503 "Database is locked" while another
component holds the write lock (CI saw it during the chaos run's scheduler fault). Nothing is
written then, so the client repeats the call; other errors are raised at once. The server here
is a real HTTP server on 127.0.0.1 that answers the way Airflow does: Airflow's lock itself
cannot be provoked on demand."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from logbroker.stack.airflow_stack import AirflowStack, AirflowStackError

LOCKED = b'{"detail":"Database is locked. Backfill creation is not supported on SQLite"}'


SILENT = 0  # an answer code: no answer until `released`


class _Server(ThreadingHTTPServer):
    answers: list[tuple[int, bytes]]
    released: threading.Event
    posts: list[bytes]
    gets: list[str]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/auth/token":
            code, answer = 201, b'{"access_token": "t"}'
        else:
            self.server.posts.append(body)
            code, answer = self.server.answers.pop(0)
            if code == SILENT:  # a server that holds the request past the client's timeout
                self.server.released.wait(10)
                return
        self.send_response(code)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self) -> None:
        self.server.gets.append(self.path)
        code, answer = self.server.answers.pop(0)
        self.send_response(code)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.posts = []
    httpd.gets = []
    httpd.released = threading.Event()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.released.set()
    httpd.shutdown()
    httpd.server_close()


def _stack(tmp_path: Path, server: _Server, naps: list[float]) -> AirflowStack:
    return AirflowStack(
        tmp_path / "home",
        dags_folder=tmp_path,
        plugins_folder=tmp_path,
        port=server.server_address[1],
        sleep=naps.append,
        request_timeout=0.5,
    )


def test_a_locked_database_is_waited_out_and_the_call_made_once_it_is_free(
    tmp_path: Path, server: _Server
) -> None:
    server.answers = [(503, LOCKED), (503, LOCKED), (200, b'{"id": 7}')]
    naps: list[float] = []
    stack = _stack(tmp_path, server, naps)
    assert stack.api("POST", "/backfills", {"dag_id": "d"}) == {"id": 7}
    assert len(server.posts) == 3 and {json.loads(p)["dag_id"] for p in server.posts} == {"d"}
    assert len(naps) == 2


def test_other_errors_and_a_lock_that_outlasts_the_timeout_are_raised_with_the_detail(
    tmp_path: Path, server: _Server
) -> None:
    server.answers = [(409, b'{"detail":"already exists"}')]
    stack = _stack(tmp_path, server, [])
    with pytest.raises(AirflowStackError, match=r"HTTP 409.*already exists"):
        stack.api("POST", "/backfills", {})
    assert len(server.posts) == 1

    server.answers = [(503, LOCKED)]
    with pytest.raises(AirflowStackError, match=r"HTTP 503.*Database is locked"):
        stack.api("POST", "/backfills", {}, locked_timeout=0)


BUSY = b'{"detail":"There is already a running backfill for dag logbroker_hourly_load"}'


def test_a_backfill_asked_while_the_previous_one_closes_waits_for_it(
    tmp_path: Path, server: _Server
) -> None:
    """CI: the end-to-end test's second backfill came right after the first one's runs ended,
    before the scheduler closed that backfill, and got 409."""
    server.answers = [(409, BUSY), (409, BUSY), (200, b'{"id": 3}')]
    naps: list[float] = []
    stack = _stack(tmp_path, server, naps)
    assert stack.create_backfill({"dag_id": "d"}) == {"id": 3}
    assert len(server.posts) == 3 and len(naps) == 2

    server.answers = [(409, b'{"detail":"a backfill of these dates exists"}')]
    with pytest.raises(AirflowStackError, match="dates exists"):
        stack.create_backfill({"dag_id": "d"})  # another conflict: raised at once
    server.answers = [(409, BUSY)]
    with pytest.raises(AirflowStackError, match="already a running backfill"):
        stack.create_backfill({"dag_id": "d"}, busy_timeout=0)


DB_ERROR = (
    b'{"detail":{"reason":"Database error","statement":"hidden","orig_error":"hidden",'
    b'"message":"Serious error when handling your request."}}'
)


def test_a_trigger_that_meets_a_database_error_is_repeated_under_its_run_id(
    tmp_path: Path, server: _Server
) -> None:
    """CI: the end-to-end test's first trigger got 500 "Database error" (SQLite's lock held
    past its busy timeout while the run's action log was written)."""
    naps: list[float] = []
    stack = _stack(tmp_path, server, naps)
    server.answers = [(500, DB_ERROR), (200, b'{"dag_run_id": "r1"}')]
    assert stack.trigger_dag_run("d", {"k": 1}, run_id="r1") == {"dag_run_id": "r1"}
    bodies = [json.loads(b) for b in server.posts]
    assert [b["dag_run_id"] for b in bodies] == ["r1", "r1"] and bodies[0]["conf"] == {"k": 1}

    # the failed try had created the run after all: the repeat meets 409, the run is read back
    server.posts.clear()
    server.answers = [
        (500, DB_ERROR),
        (409, b'{"detail":"DAG run with id r2 already exists"}'),
        (200, b'{"dag_run_id": "r2"}'),
    ]
    assert stack.trigger_dag_run("d", run_id="r2") == {"dag_run_id": "r2"}
    assert len(server.posts) == 2 and server.gets == ["/api/v2/dags/d/dagRuns/r2"]

    server.answers = [(500, b'{"detail":"something else"}')]
    with pytest.raises(AirflowStackError, match="something else"):
        stack.trigger_dag_run("d")  # another server error: raised at once
    server.answers = [(409, b'{"detail":"exists"}')]
    with pytest.raises(AirflowStackError, match="409"):
        stack.trigger_dag_run("d", run_id="r3")  # a conflict on the first try is the caller's


def test_a_backfill_that_meets_a_database_error_is_asked_again_unless_it_was_created(
    tmp_path: Path, server: _Server
) -> None:
    """CI: POST /backfills answered 500 "Database error" 25 ms in (SQLite refused the action
    log's write at once) and the end-to-end test's fixture failed."""
    naps: list[float] = []
    stack = _stack(tmp_path, server, naps)
    body = {
        "dag_id": "d",
        "from_date": "2026-11-22T10:00:00+00:00",
        "to_date": "2026-11-22T11:00:00Z",
    }
    none_open = b'{"backfills": [], "total_entries": 0}'
    server.answers = [(500, DB_ERROR), (200, none_open), (200, b'{"id": 4}')]
    assert stack.create_backfill(body) == {"id": 4}
    assert len(server.posts) == 2 and server.gets == ["/api/v2/backfills?dag_id=d&limit=100"]

    # the failed try had created it: found among the DAG's open backfills, not asked twice
    server.posts.clear()
    server.gets.clear()
    listed = {
        "backfills": [
            {"id": 5, "from_date": "2026-11-22T10:00:00Z", "to_date": "2026-11-22T11:00:00Z",
             "completed_at": None},
            {"id": 6, "from_date": "2026-11-22T10:00:00Z", "to_date": "2026-11-22T12:00:00Z",
             "completed_at": None},
        ],
        "total_entries": 2,
    }  # fmt: skip
    server.answers = [(500, DB_ERROR), (200, json.dumps(listed).encode())]
    assert stack.create_backfill(body)["id"] == 5
    assert len(server.posts) == 1

    server.answers = [(500, DB_ERROR)]
    with pytest.raises(AirflowStackError, match="Database error"):
        stack.create_backfill(body, busy_timeout=0)


def test_a_trigger_left_unanswered_is_repeated_under_its_run_id(
    tmp_path: Path, server: _Server
) -> None:
    """CI: the end-to-end test's first trigger got no answer within the client's timeout
    (SQLite's write lock held by the scheduler and the DAG processor as the stack started)."""
    stack = _stack(tmp_path, server, [])
    # the unanswered try had created the run: the repeat meets 409 and the run is read back
    server.answers = [
        (SILENT, b""),
        (409, b'{"detail":"DAG run with id r4 already exists"}'),
        (200, b'{"dag_run_id": "r4"}'),
    ]
    assert stack.trigger_dag_run("d", run_id="r4") == {"dag_run_id": "r4"}
    assert [json.loads(b)["dag_run_id"] for b in server.posts] == ["r4", "r4"]
    assert server.gets == ["/api/v2/dags/d/dagRuns/r4"]

    # any other call left unanswered: an error that says which and how long
    server.answers = [(SILENT, b"")]
    with pytest.raises(AirflowStackError, match=r"POST /api/v2/backfills: no answer in 0.5 s"):
        stack.api("POST", "/backfills", {})
