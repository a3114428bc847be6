"""The stacks: real servers run as processes on one machine, in production shape.

`make up` and `make demo` (scripts/up.py, scripts/demo.py) and `logbroker quickstart` run these;
the tests, the chaos runs and the benchmarks start the same ones (no mocks).

    zookeeper         ZooKeeperServer (Debian's ZooKeeper on 127.0.0.1, a free port unless
                      given), ZkTarget (a chroot on it), free-port helpers;
                      `python -m logbroker.stack.zookeeper` runs one in the foreground
    broker            BrokerProcess: `logbroker broker` as a process; stop, kill -9
    quickstart        `logbroker quickstart`: the README's ZooKeeper, live and analysis clusters
    traffic           simulated member activity for the demo topics
    airflow_stack     AirflowStack: Airflow 3's api-server, scheduler, dag-processor, triggerer
    airflow_sqlite    its SQLite connection settings (named by dotted path in its config)
    postgres          PostgresServer: Airflow's database for `make up`, a cluster of its own
    spark_standalone  SparkStandalone: a Spark master and workers on 127.0.0.1 (`make up`)
    pipeline_stack    PipelineStack: all of the above as the whole pipeline (`make demo`, `make up`)

Library code: it runs Airflow, Spark and PostgreSQL as commands and imports none of them, nor
the broker's server (a broker is a process). The tools only tests use (separate hosts, faults,
the fuzzer, Jepsen, a browser) are in the checkout's harness/, which is not installed.
"""
