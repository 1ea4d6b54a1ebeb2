"""Capacity reports: a PySpark job over an SST export (see timerwheel.capacity.report)."""
