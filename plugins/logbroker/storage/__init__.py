"""Segment files, the log of a partition, recovery, retention, flushing, the log manager."""
