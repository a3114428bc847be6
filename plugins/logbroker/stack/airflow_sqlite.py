"""How the test stack's Airflow connects to its SQLite database.

Every component (api-server, scheduler, dag-processor, triggerer, task processes) writes to
one SQLite file. Python's sqlite3 waits 5 s for another connection's write lock, then fails;
Airflow answers that request with 500 "Database error" (CI saw it on POST /dagRuns and POST
/backfills while a busy machine slowed a writer: the failing request took 5.1 s). Waiting up
to 60 s turns it into a slow answer. Named by `AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS`
(Airflow imports the dict by its dotted path).
"""

CONNECT_ARGS = {"timeout": 60.0, "check_same_thread": False}
