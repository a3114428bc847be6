"""spark-submit spark_apps/jobs/audit.py --help: producer counts against every tier, per window.

The work is in the `spark_apps.audit` package; this file is what spark-submit runs.
"""

import sys

from spark_apps.audit.cli import main

if __name__ == "__main__":
    sys.exit(main())
