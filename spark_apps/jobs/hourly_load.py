"""spark-submit spark_apps/jobs/hourly_load.py --help: the hourly, offset-checkpointed load.

The work is in the `spark_apps.load` package; this file is what spark-submit runs.
"""

import sys

from spark_apps.load.cli import main

if __name__ == "__main__":
    sys.exit(main())
