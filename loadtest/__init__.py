"""Load-test harness of timerwheel: reproduces the shape of TDMQ's timer benchmark table.

    timerwheel loadtest --scenario smoke                  # seconds, spawns a server
    timerwheel loadtest --scenario tdmq --delay-scale 0.1 --json out.json
    timerwheel loadtest --scenario burst --count 1000000 --target 127.0.0.1:7070

Pieces, each a small module:

* `scenarios` - the named presets (smoke, tdmq, burst, cancel, backlog) and their knobs;
* `pacing`    - the open-loop send schedule, the delay distribution, the body codec that
  lets a consumer tell which producer sent which message;
* `producer`  - one producer process (SendBatch futures, paced, never slowed by the server);
* `consumer`  - one consumer process (Subscribe streams, pipelined acks, delay tallies);
* `accounting`- merging what the processes saw into sent / acked / lost / dup / early;
* `server_proc` - a spawned `timerwheel serve` and the Stats sampler;
* `harness`   - the run itself; `figures` - what a run measured, as one JSON-ready dict;
* `report`    - the Markdown table laid out like TDMQ's, and the JSON.

docs/lab-log.md has the runs on the project's machine.
"""
