"""How long a test waits for anything that should happen soon."""

WAIT_S = 10.0  # generous: the suite runs beside other work on 2 cores
