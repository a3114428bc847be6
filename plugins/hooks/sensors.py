"""`MirrorCaughtUpSensor`: has the analysis cluster everything the live cluster had?

When the sensor runs (after its data interval ended), it reads the latest offset of every
partition of the mirrored topics on the live cluster: those offsets cover at least what the
live cluster held at the interval's end. It then waits until the mirror's consumer group has
committed offsets at or past them (see triggers.py for why that means "copied"). Deferrable
by default: the wait happens in the triggerer, holding no worker slot.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context
from airflow.sdk.exceptions import AirflowException

from .logbroker_hook import LogbrokerHook, Offsets
from .triggers import MirrorCaughtUpTrigger, partitions_behind


class MirrorCaughtUpSensor(BaseSensorOperator):
    template_fields = ("whitelist",)

    def __init__(
        self,
        *,
        live_conn_id: str,
        mirror_group: str,
        whitelist: str = ".*",
        deferrable: bool = True,
        poll_interval: float = 10.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("timeout", timedelta(hours=1).total_seconds())
        super().__init__(poke_interval=poll_interval, **kwargs)
        self.live_conn_id = live_conn_id
        self.mirror_group = mirror_group
        self.whitelist = whitelist
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self._targets: Offsets | None = None

    def _hook(self) -> LogbrokerHook:
        return LogbrokerHook(self.live_conn_id)

    def targets(self) -> Offsets:
        """The live cluster's latest offsets now, for the topics the mirror copies."""
        if self._targets is None:
            pattern = re.compile(self.whitelist)
            offsets = self._hook().end_offsets()
            self._targets = {t: p for t, p in offsets.items() if pattern.fullmatch(t)}
            self.log.info(
                "waiting for mirror group %s to reach %d partition(s) of %d topic(s)",
                self.mirror_group,
                sum(len(p) for p in self._targets.values()),
                len(self._targets),
            )
        return self._targets

    def poke(self, context: Context) -> bool:
        committed = self._hook().committed_offsets(self.mirror_group)
        behind = partitions_behind(self.targets(), committed)
        if behind:
            self.log.info("%d partition(s) behind: %s", len(behind), behind)
        return not behind

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        self.defer(
            trigger=MirrorCaughtUpTrigger(
                logbroker_conn_id=self.live_conn_id,
                group=self.mirror_group,
                targets=self.targets(),
                poll_interval=self.poll_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> None:
        if not event or event.get("status") != "caught_up":
            raise AirflowException(f"mirror wait ended without catching up: {event!r}")
        self.log.info("mirror group %s caught up", self.mirror_group)
