"""`FuzzReport`: the counters and findings of a fuzz run, its verdict (`ok`) and its text."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class FuzzReport:
    """What a fuzz run did and found. The run is clean when `ok` holds."""

    seed: int
    requests_planned: int
    requests_sent: int = 0
    valid_requests: int = 0
    mutated_requests: int = 0
    responses_received: int = 0
    connections_opened: int = 0
    connections_closed_by_broker: int = 0
    closed_after_client_eof: int = 0
    timeouts: int = 0
    split_sends: int = 0
    valid_failures: int = 0
    crashes: int = 0
    liveness_checks: int = 0
    files_before: int = 0
    bytes_before: int = 0
    files_after: int = 0
    bytes_after: int = 0
    old_bytes_changed: int = 0
    invalid_bytes: int = 0
    bytes_changed_by_invalid: int = 0
    known_sets: int = 0
    known_sets_mismatched: int = 0
    broker_errors_logged: int | None = None
    elapsed_s: float = 0.0
    aborted: bool = False
    mutations: dict[str, int] = field(default_factory=dict)
    framing: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    timeout_samples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.crashes == 0
            and self.bytes_changed_by_invalid == 0
            and self.known_sets_mismatched == 0
            and self.valid_failures == 0
            and not self.aborted
            and not self.broker_errors_logged
        )

    @property
    def requests_per_s(self) -> float:
        return self.requests_sent / self.elapsed_s if self.elapsed_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["requests_per_s"] = round(self.requests_per_s, 1)
        return out

    def note(self, message: str, limit: int = 50) -> None:
        if len(self.failures) < limit:
            self.failures.append(message)

    def __str__(self) -> str:
        lines = [
            f"fuzz run, seed {self.seed}: {'OK' if self.ok else 'PROBLEMS FOUND'}",
            f"  requests sent            {self.requests_sent} of {self.requests_planned} "
            f"({self.valid_requests} valid, {self.mutated_requests} mutated) in "
            f"{self.elapsed_s:.1f} s ({self.requests_per_s:.0f}/s)",
            f"  responses received       {self.responses_received}",
            f"  connections              {self.connections_opened} opened, "
            f"{self.connections_closed_by_broker} closed by the broker, "
            f"{self.closed_after_client_eof} closed after the client's EOF, "
            f"{self.timeouts} abandoned after a timeout",
            f"  sent in pieces           {self.split_sends}",
            f"  valid request failures   {self.valid_failures}",
            f"  broker crashes           {self.crashes} ({self.liveness_checks} liveness checks)",
            f"  stored data              {self.files_before} files / {self.bytes_before} bytes "
            f"before, {self.files_after} files / {self.bytes_after} bytes after",
            f"  bytes changed by invalid {self.bytes_changed_by_invalid} "
            f"({self.old_bytes_changed} old bytes changed, {self.invalid_bytes} invalid bytes)",
            f"  known sets re-fetched    {self.known_sets}, {self.known_sets_mismatched} differ",
        ]
        if self.broker_errors_logged is not None:
            lines.append(f"  broker errors logged     {self.broker_errors_logged}")
        if self.aborted:
            lines.append("  the run was aborted: the broker stopped serving")
        lines.append(
            "  mutators                 "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.mutations.items()))
        )
        lines.append(
            "  stream endings           "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.framing.items()))
        )
        lines += [f"  ! {f}" for f in self.failures]
        return "\n".join(lines)
