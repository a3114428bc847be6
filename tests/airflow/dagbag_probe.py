"""Parses dags/ in a fresh interpreter and prints, as JSON, what the DAG files import.

Run by test_dagbag.py in a subprocess: the test session itself may already hold pyspark or
great_expectations, which would hide a heavy import at parse time.
"""

import json
import sys

from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
heavy = sorted(
    m
    for m in sys.modules
    if m.split(".")[0] in {"pyspark", "great_expectations", "pandas", "fastavro"}
)
print(
    json.dumps(
        {
            "import_errors": {k: str(v) for k, v in bag.import_errors.items()},
            "dags": sorted(bag.dags),
            "heavy": heavy,
        }
    )
)
