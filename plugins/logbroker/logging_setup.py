"""Log lines for people and for machines: `--log-format text` (default) or `json`.

text:  2026-11-22T16:21:57.123Z INFO  logbroker.server.broker  broker 0 listening on ...
json:  {"ts": "2026-11-22T16:21:57.123Z", "level": "INFO", "logger": "...", "msg": "..."}
"""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings


class _UtcFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{base}.{int(record.msecs):03d}Z"


class JsonFormatter(_UtcFormatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str = "INFO", fmt: str = "text", *, quiet_kazoo: bool = False) -> None:
    """Log to stderr at `level`; with `quiet_kazoo`, kazoo's own lines (one warning per failed
    connection attempt) only at DEBUG, for commands that report a failure themselves."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(_UtcFormatter("%(asctime)s %(levelname)-5s %(name)s  %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    kazoo_level = max(logging.WARNING, root.level)
    if quiet_kazoo and root.level > logging.DEBUG:
        kazoo_level = logging.CRITICAL + 1
        # kazoo's two-line UserWarning for a connect string whose chroot is not there yet: the
        # command says in one line what is missing there (no live broker, no such group, ...)
        warnings.filterwarnings("ignore", "No chroot path exists", UserWarning, "kazoo")
    logging.getLogger("kazoo").setLevel(kazoo_level)
