"""The `timerwheel` command line: sub-commands, settings loading and log set-up."""
