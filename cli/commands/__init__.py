"""One module per `timerwheel` sub-command (or group of related ones).

Each module defines `register(subparsers)`, which adds its parsers and sets
`func=callable(args) -> int` on each. `timerwheel.cli.main` discovers the modules, so adding a
command never means editing a shared list.
"""
