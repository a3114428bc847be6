"""docker-compose's airflow-init service: migrate Airflow's database and set the admin login.

Runs once before the api-server, scheduler, dag-processor and triggerer start (they wait
for it to complete). The admin's password comes from AIRFLOW_ADMIN_PASSWORD (.env), and is
written where the simple auth manager reads it (SIMPLE_AUTH_MANAGER_PASSWORDS_FILE).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def main() -> int:
    password = os.environ.get("AIRFLOW_ADMIN_PASSWORD", "")
    if not password:
        print(
            "airflow-init: set AIRFLOW_ADMIN_PASSWORD in .env (see .env.example)", file=sys.stderr
        )
        return 2
    passwords = Path(os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
    passwords.parent.mkdir(parents=True, exist_ok=True)
    passwords.write_text(json.dumps({"admin": password}))
    passwords.chmod(0o600)
    return subprocess.run(["airflow", "db", "migrate"], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
