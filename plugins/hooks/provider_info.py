"""Tells Airflow about our connection types, so the UI's connection form knows them.

Airflow discovers connection types from installed packages' `apache_airflow_provider`
entry point (pyproject.toml points it here); this is the runtime form of a provider.yaml:
the hook classes by connection type, the extra fields the form shows, and how it relabels
or hides the standard ones. Nothing here imports Airflow, so discovery stays cheap. Spark is
submitted through Airflow's Spark provider and its connection type `spark` (spark_submit.py).
"""

from __future__ import annotations

from typing import Any


def _text(label: str, description: str, default: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": ["string", "null"]}
    if default is not None:
        schema["default"] = default
    return {"label": label, "description": description, "schema": schema}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "logbroker",
        "name": "logbroker",
        "description": "Hooks, operators and sensors for logbroker clusters and its Spark apps.",
        "versions": ["0.1.0"],
        "connection-types": [
            {
                "connection-type": "logbroker",
                "hook-class-name": "hooks.logbroker_hook.LogbrokerHook",
                "hook-name": "Logbroker",
                "conn-fields": {
                    "schema_registry": _text(
                        "Schema registry",
                        "ZooKeeper connect string of the schema registry (schema.registry.zk)",
                        "127.0.0.1:2181/registry",
                    ),
                    "compression_codec": {
                        "label": "Compression",
                        "description": "codec of the producers the hook hands out",
                        "schema": {
                            "type": ["string", "null"],
                            "default": "none",
                            "enum": ["none", "gzip", "snappy"],
                        },
                    },
                    "acks": {
                        "label": "Acknowledgement",
                        "description": "none (0.7 produce), ack (appended) or fsync (on disk)",
                        "schema": {
                            "type": ["string", "null"],
                            "default": "ack",
                            "enum": ["none", "ack", "fsync"],
                        },
                    },
                    "timeout_s": {
                        "label": "Timeout (s)",
                        "description": "ZooKeeper and socket timeout",
                        "schema": {"type": ["number", "null"], "default": 10},
                    },
                },
                # login and password: the SASL user and its password (Airflow encrypts and
                # masks the password); extra, shown: the client's non-secret settings by
                # Kafka's names (security.protocol, sasl.mechanism, ssl.cafile, ...), which
                # a form field cannot be named (a dot nests form values): docs/airflow.md
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port"],
                    "relabeling": {
                        "host": "ZooKeeper connect (with chroot)",
                        "login": "SASL user (sasl.username)",
                        "password": "SASL password (sasl.password)",
                    },
                    "placeholders": {
                        "host": "127.0.0.1:2181/live",
                        "login": "mirror",
                        "extra": '{"security.protocol": "SASL_SSL", '
                        '"sasl.mechanism": "SCRAM-SHA-256", "ssl.cafile": "/etc/logbroker/ca.pem"}',
                    },
                },
            },
        ],
    }
