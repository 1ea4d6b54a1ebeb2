"""Pure timer-wheel math and the scheduler core: no I/O, no wall clock."""
