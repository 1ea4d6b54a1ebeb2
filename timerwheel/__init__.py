"""Generated gRPC code for the public API (`timerwheel.v1`); regenerate with
`python -m server.protogen`, never edit by hand."""
