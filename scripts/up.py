"""`make up` / `make down`: the pipeline left running on this machine, with live traffic.

    .venv/bin/python scripts/up.py up   [--workdir var/up] [--port 8080] [--rate 20] [--fresh]
                                        [--spark-port 7077] [--spark-ui-port 8180]
                                        [--first-hour YYYY-MM-DDTHH]
    .venv/bin/python scripts/up.py down [--workdir var/up]

`up` starts the stack a team would run on one machine: PostgreSQL as Airflow's database (a
cluster of its own under <workdir>/postgres, loopback only, its password in a 0600 file), a
Spark standalone cluster (a master on --spark-port and two workers, web UIs on
--spark-ui-port and the two ports after it), ZooKeeper, the live and analysis clusters of
three brokers each (the pipeline's topics replicated three times, docs/replication.md), the
schema registry (and Confluent's REST API over it, `logbroker schema-registry`, on
127.0.0.1:8081, or a free port printed if 8081 is taken), and Airflow's api-server (the UI on 127.0.0.1:--port, 8080 unless UI_PORT
says otherwise), scheduler, dag-processor and triggerer on LocalExecutor; the load and the
audit are submitted to the standalone master. The DAGs are unpaused on the real clock: the
mirror every 5 minutes, the hourly load at every hour, the audit after each load. A traffic
process sends audited events (page views, searches, ad clicks) at --rate events a second,
acknowledged by every in-sync replica (acks=-1).

The hourly load schedules every hour from the first `up`'s (--first-hour: an earlier one, whose
runs the scheduler then creates at once) and catches up: after a `down`, the next `up` loads
each hour that ended meanwhile, one run per hour, in order.

A fixed port that is taken stops `up` with one line naming it, before anything starts. It
returns once Airflow is healthy and prints the UI's URL, the login and where each part logs.
Everything runs in the background until `down` stops it, by the PIDs recorded in
<workdir>/stack.json.

The stack is secure by default (docs/deploy.md, "How `make up` secures itself"): at the first
`up` a CA, the brokers' certificates, one SCRAM user per component (traffic, mirror, loads,
audit) and a ZooKeeper digest are made under <workdir>/security (0700, files 0600) and kept for
the next ones; the brokers take SASL_SSL and SASL_SSL08 (SCRAM-SHA-256 logins) and Kafka 0.8's
clients on SSL08 with a client certificate (kcat's: security/kcat.pem, kcat.conf), replicate
only between themselves, and authorize every request by the users' ACLs. The data (Airflow's database, the brokers' logs, ZooKeeper, the
warehouse) stays in --workdir: `up` again resumes on it; --fresh starts from nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from logbroker.protocol.errors import LogbrokerError
from logbroker.protocol.topics import AUDIT_TOPIC
from logbroker.stack.airflow_stack import AirflowStackError
from logbroker.stack.pipeline_stack import PipelineStack, port_08, stop_recorded
from logbroker.stack.postgres import PostgresError, PostgresServer
from logbroker.stack.security import COMPONENTS
from logbroker.stack.spark_standalone import SparkClusterError, SparkStandalone
from logbroker.stack.traffic import TOPICS
from logbroker.stack.zookeeper import taken_port

ROOT = Path(__file__).resolve().parents[1]
REGISTRY_API_PORT = 8081  # Confluent's; a free one if it is taken (printed)
DEFAULT_UI_PORT = 8080  # Airflow's own default; UI_PORT (make up UI_PORT=8090) sets another
BROKERS = 3  # per cluster
REPLICATION_FACTOR = 3  # of every topic the pipeline loads, in both clusters
# A produce with acks=-1 is acknowledged once two of the three replicas have it, and refused
# (not silently taken by one) when only one is in sync; the mirror creates a topic the analysis
# cluster lacks with three replicas.
BROKER_SETTINGS = {
    "default.replication.factor": str(REPLICATION_FACTOR),
    "min.insync.replicas": "2",
}


def first_hour(workdir: Path, asked: str | None) -> str:
    """The first hour the hourly load schedules: the one kept in the stack's pipeline.json
    (`up` again resumes from there, catching up), else `asked`, else the current hour."""
    pipeline = workdir / "pipeline.json"
    if pipeline.exists():
        kept = json.loads(pipeline.read_text()).get("start_date")
        if kept:
            return str(kept)[:13]
    if asked is not None:
        return datetime.strptime(asked, "%Y-%m-%dT%H").strftime("%Y-%m-%dT%H")
    return datetime.now(UTC).strftime("%Y-%m-%dT%H")


def up(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir).resolve()
    if (workdir / "stack.json").exists():
        print(f"already up (see {workdir / 'stack.json'}); `make down` first", file=sys.stderr)
        return 1
    if workdir.exists() and args.fresh:
        shutil.rmtree(workdir)
    # Three JVMs starting at once: under a load average of 30 on this 2-core machine the
    # workers took over 90 s to register (twice in a row); they do not need 90 s when idle.
    spark = SparkStandalone(
        workdir / "spark",
        master_port=args.spark_port,
        ui_port=args.spark_ui_port,
        workers=2,
        timeout=240,
    )
    postgres = PostgresServer(workdir / "postgres")
    postgres_port = postgres.port  # chosen at the first `up`
    wanted = {args.port: "the Airflow UI", **spark.ports()}
    if postgres_port is not None:
        wanted[postgres_port] = f"PostgreSQL, chosen at the first `up` in {workdir}"
    taken = taken_port(wanted)
    if taken is not None:
        port, what = taken
        if port == args.port:
            fix = "choose another with `make up UI_PORT=8090` (or scripts/up.py up --port)"
        elif port == postgres_port:
            fix = "stop what holds it, or start afresh with `make up UP_ARGS=--fresh`"
        else:
            fix = "choose others with `make up UP_ARGS='--spark-port 7078 --spark-ui-port 8190'`"
        print(f"up: port {port} on 127.0.0.1 ({what}) is taken: {fix}", file=sys.stderr)
        return 2
    try:
        postgres.preflight()
    except PostgresError as exc:
        print(f"up: {exc}", file=sys.stderr)
        return 2
    stack = PipelineStack(
        workdir,
        port=args.port,
        spark_cluster=spark,
        postgres=True,
        brokers_per_cluster=BROKERS,
        replicated={topic: REPLICATION_FACTOR for topic in (*TOPICS, AUDIT_TOPIC)},
        broker_settings=BROKER_SETTINGS,
        hours=(first_hour(workdir, args.first_hour), None),
        catchup=True,
        registry_api_port=REGISTRY_API_PORT,
        security=True,
        log=lambda s: print(f"  {s}", flush=True),
    )
    # Airflow behind FAB's auth manager: users admin and viewer, passwords made once (0600)
    stack.airflow.use_fab(workdir / "security" / "airflow-users.json")
    try:
        stack.start()  # on failure it stops what it had started
    except (PostgresError, SparkClusterError, AirflowStackError, LogbrokerError) as exc:
        print(f"up: {exc}", file=sys.stderr)
        return 1
    stack.zookeeper.keep_running()  # it outlives this command, until `make down`
    assert stack.security is not None
    security = stack.security
    log = open(workdir / "traffic.log", "ab")  # noqa: SIM115 - the child keeps it
    traffic = subprocess.Popen(
        [sys.executable, __file__, "traffic", "--live", stack.live, "--registry", stack.registry,
         "--rate", str(args.rate),
         "--client-config", str(security.directory / "traffic.properties")],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    state_file = workdir / "stack.json"
    state = json.loads(state_file.read_text())
    state["traffic"] = {"pid": traffic.pid}
    state_file.write_text(json.dumps(state, indent=1) + "\n")
    assert stack.postgres is not None
    airflow_logs = stack.airflow.home / "logs"
    logins = ", ".join(f"{user} / {password}" for user, password in stack.airflow.logins().items())
    print(
        f"up: Airflow UI at {stack.airflow.url}  (logins: {logins}; in {stack.airflow.passwords_path})"
    )
    print(f"    the Pipeline page: {stack.airflow.url}/logbroker/pipeline")
    print(f"    Airflow's database: PostgreSQL on 127.0.0.1:{stack.postgres.port} "
          f"(password in {stack.postgres.password_path})")  # fmt: skip
    print(f"    Spark: master {spark.master_url}, 2 workers, UI {spark.ui_url}")
    for name, brokers in stack.brokers.items():
        ports = ", ".join(str(b.listener_ports["SASL_SSL"]) for b in brokers)
        print(f"    {name} cluster: {len(brokers)} brokers, SASL_SSL on 127.0.0.1:{ports}")
        listeners = ",".join(f"127.0.0.1:{port_08(b)}" for b in brokers)
        print(f"      Kafka 0.8's clients (bootstrap.servers), SSL08 with a client certificate: "
              f"{listeners}; kcat -F {security.directory / 'kcat.conf'} -b {listeners} -L")  # fmt: skip
    print(f"    security: {security.directory} (CA ca.pem; users and passwords users.json; "
          f"each component's client settings <user>.properties: {', '.join(COMPONENTS)})")  # fmt: skip
    print(f"    topics: {', '.join(stack.replicated)}, replication factor {REPLICATION_FACTOR}, "
          f"producers acks=-1")  # fmt: skip
    print(f"    hourly load: every hour from {stack.hours[0] if stack.hours else '?'}:00 UTC, "
          "catching up the hours it missed")  # fmt: skip
    print(f"    live traffic: {args.rate} events/s on {', '.join(TOPICS)}")
    print(f"    warehouse: {stack.warehouse}")
    assert stack.registry_api is not None
    print(f"    schema registry: ZooKeeper {stack.registry}; Confluent's API (schema.registry.url) "
          f"{stack.registry_api.url}")  # fmt: skip
    print("  logs:")
    print(f"    Airflow     {airflow_logs}/<component>.out, task logs {airflow_logs}/dag_id=*")
    print(f"    PostgreSQL  {stack.postgres.log_path}")
    print(f"    Spark       {spark.directory}/master.log, worker-<i>.log, executors worker-<i>/")
    print(f"    ZooKeeper   {stack.zookeeper.log_path}")
    print(f"    brokers     {workdir}/live-<i>/broker.log, {workdir}/analysis-<i>/broker.log")
    print(f"    traffic     {workdir}/traffic.log (as user traffic)")
    print(f"    registry    {stack.registry_api.log_path}")
    print(f"  the airflow command in this stack: . {stack.airflow.home}/env.sh")
    print("  stop everything with `make down` (the data stays; `make up` resumes on it)")
    return 0


def down(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir).resolve()
    state_file = workdir / "stack.json"
    if not state_file.exists():
        print(f"nothing is up in {workdir}")
        return 0
    # The traffic process first: on SIGTERM it publishes its audit counts, then exits.
    started = time.monotonic()
    stopped = stop_recorded(workdir, log=lambda s: print(f"  {s}", flush=True))
    print(f"down: stopped {len(stopped)} process groups in {time.monotonic() - started:.1f} s")
    return 0


def traffic(args: argparse.Namespace) -> int:
    """Send audited events at a steady rate with the current time, until SIGTERM."""
    from logbroker.audit import AuditedProducer
    from logbroker.client.producer import Producer
    from logbroker.serde import SchemaRegistry
    from logbroker.stack.traffic import activity

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # acks=-1: an acknowledged event is on every in-sync replica (a 0.7 topic's broker is its
    # whole ISR); retried across a leader's failover (the producer's delivery timeout).
    properties: dict[str, str] = {}
    if args.client_config:  # the traffic user's (security.protocol, sasl.*, ssl.cafile)
        from logbroker.config import read_properties

        properties = read_properties(Path(args.client_config).read_text().splitlines())
    producer = Producer.from_properties(
        properties,
        zk_connect=args.live,
        acks="ack",
        request_required_acks=-1,
        compression_codec="snappy",
        retry_backoff_ms=200,
    )
    shares = {"page_views": 0.65, "searches": 0.28, "ad_clicks": 0.07}
    with SchemaRegistry(args.registry) as registry, AuditedProducer(producer, registry) as audited:
        second = 0
        try:
            while True:
                started = time.time()
                for topic in TOPICS:
                    count = max(1, round(args.rate * shares[topic]))
                    records = activity(topic, int(started * 1000), count, second, span_ms=1000)
                    audited.send(topic, records)
                second += 1
                time.sleep(max(0.0, 1 - (time.time() - started)))
        except KeyboardInterrupt:
            pass  # closing the producer publishes the counts of the open windows
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="up.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "down"):
        p = sub.add_parser(name)
        p.add_argument("--workdir", default=str(ROOT / "var" / "up"))
        if name == "up":
            p.add_argument(
                "--port",
                type=int,
                default=int(os.environ.get("UI_PORT") or DEFAULT_UI_PORT),
                help="the Airflow UI's port on 127.0.0.1 (default: $UI_PORT, else 8080)",
            )
            p.add_argument("--spark-port", type=int, default=7077, help="the master's (7077)")
            p.add_argument(
                "--spark-ui-port",
                type=int,
                default=8180,
                help="the master's web UI (8180); the workers' on the next two ports",
            )
            p.add_argument("--rate", type=int, default=20, help="events a second (default 20)")
            p.add_argument(
                "--fresh", action="store_true", help="delete --workdir first: start from nothing"
            )
            p.add_argument(
                "--first-hour",
                metavar="YYYY-MM-DDTHH",
                help="the first hour the hourly load schedules, at the first `up` of --workdir "
                "(default: the current hour); `up` again keeps it",
            )
    t = sub.add_parser("traffic", help="(internal) the live traffic process")
    t.add_argument("--live", required=True)
    t.add_argument("--registry", required=True)
    t.add_argument("--rate", type=int, default=20)
    t.add_argument("--client-config", help="a properties file: Kafka's client settings")
    args = parser.parse_args(argv)
    return {"up": up, "down": down, "traffic": traffic}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
