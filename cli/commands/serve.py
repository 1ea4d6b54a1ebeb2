"""`timerwheel serve`: run the gRPC service on an embedded RocksDB.

    timerwheel serve                                  # ./data, 127.0.0.1:7070
    timerwheel serve --data-dir /var/lib/tw --host 0.0.0.0 --port 7070
    timerwheel serve --port 0 --port-file /tmp/tw.port   # any free port, written there
    timerwheel serve --config timerwheel.toml --ack-timeout 10s --set max_unacked=50000
    timerwheel serve --workers 4                      # engine, delivery, 4 gRPC processes
    timerwheel serve --metrics-port 9464              # Prometheus /metrics (docs/metrics.md)
    timerwheel serve --console-port 8080              # web console (docs/console.md)
    timerwheel serve --host 0.0.0.0 --tls-cert server.pem --tls-key server.key \
        --auth-tokens tokens.toml [--tls-client-ca clients-ca.pem] [--export-root /srv/exports]

Settings: defaults < --config TOML < TIMERWHEEL_<SETTING> environment < flags (see
timerwheel.cli.config). By default the server runs in this one process; --workers N runs it as
processes (timerwheel.procs.supervisor): the engine (RocksDB and the single writer), delivery, and
N gRPC workers sharing the port. SIGTERM or Ctrl-C stops it gracefully: no new calls, calls in
progress finish, queued writes are committed, RocksDB is closed; the next start resumes.

Security (docs/security.md): a host other than loopback needs TLS and tokens, or
--insecure; TimerAdmin.Export is off until --export-root names where it may write.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import structlog

from timerwheel.cli.config import load_settings, parse_assignment
from timerwheel.observability.log_config import FORMATS, LEVELS, configure_logging
from timerwheel.procs.lifecycle import SignalStop
from timerwheel.security.settings import SecuritySettings
from timerwheel.wheels.settings import SettingsError

log = structlog.get_logger("timerwheel.serve")

# flag -> (Settings field, help). Values are converted by timerwheel.cli.config: a duration
# flag needs its unit (`--ack-timeout 10s`; a bare `10` is refused, naming the flag).
SETTING_FLAGS = {
    "--data-dir": ("data_dir", "RocksDB directory (default ./data)"),
    "--host": ("host", "address to listen on (default 127.0.0.1)"),
    "--port": ("port", "port to listen on; 0 picks a free one (default 7070)"),
    "--ack-timeout": ("ack_timeout_ms", "redeliver un-acked deliveries after this (default 30s)"),
    "--max-in-flight": ("max_in_flight_default", "un-acked per subscriber when it asks 0"),
    "--max-unacked": ("max_unacked", "fired, un-acked backlog at which sends are refused"),
    "--max-queued-ops": ("max_queued_ops", "writer queue depth at which sends are refused"),
    "--admit-fire-lag": (
        "admit_fire_lag_ms",
        "refuse sends while fires run this late; 0: never (default 20ms)",
    ),
    "--admit-due-load": (
        "admit_due_load_pct",
        "refuse sends while the fires due ahead plus the sends would take more than this "
        "%% of the CPU the process gets; 0: never (default 85)",
    ),
    "--max-delay": ("max_delay_ms", "furthest delivery time accepted (default 400d)"),
    "--fire-tick": (
        "fire_tick_ms",
        "fire commits at least this far apart; a lone timer fires on time (default 4ms)",
    ),
    "--retention": ("retention_ms", "how long ACKED/CANCELLED stay queryable (default 3d)"),
    "--workers": ("workers", "run as processes: engine, delivery, N gRPC workers (default 0: one)"),
    "--grpc-workers": ("grpc_workers", "threads for unary calls per worker (default 32)"),
    "--max-subscribers": ("max_subscribers", "concurrent Subscribe streams (default 256)"),
    "--metrics-port": (
        "metrics_port",
        "serve Prometheus /metrics on this port (default -1: off; 0: a free one)",
    ),
    "--metrics-host": ("metrics_host", "address of /metrics (default 127.0.0.1)"),
    "--console-port": (
        "console_port",
        "serve the web console on this port (default -1: off; 0: a free one)",
    ),
    "--console-host": ("console_host", "address of the web console (default 127.0.0.1)"),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the timer service (gRPC) on an embedded RocksDB",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config", metavar="FILE.toml",
        help='TOML file of settings; per-topic retry defaults are tables: [topics."orders"] '
        'max_attempts = 5, [topics."orders".retry] initial_ms = "2s" (docs/features.md)',
    )  # fmt: skip
    for flag, (name, text) in SETTING_FLAGS.items():
        metavar = "DURATION" if name.endswith("_ms") else name.upper()  # 10s, not a bare 10
        parser.add_argument(flag, dest=name, metavar=metavar, help=text)
    sync = parser.add_mutually_exclusive_group()
    sync.add_argument(
        "--no-sync", dest="sync_writes", action="store_const", const="false",
        help="do not fsync each group commit (WAL still on; a machine crash may lose "
        "the last writes, a process crash does not)",
    )  # fmt: skip
    sync.add_argument("--sync", dest="sync_writes", action="store_const", const="true")
    parser.add_argument(
        "--set", dest="assignments", action="append", default=[], metavar="NAME=VALUE",
        help="any other setting by its Settings name, e.g. --set delivery_batch_max=1000",
    )  # fmt: skip
    _register_security(parser)
    _register_cluster(parser)
    parser.add_argument("--port-file", help="write the bound port here once serving")
    parser.add_argument("--metrics-port-file", help="write the bound metrics port here")
    parser.add_argument("--console-port-file", help="write the bound console port here")
    parser.add_argument("--log-level", choices=LEVELS, default="info")
    parser.add_argument(
        "--log-format", choices=FORMATS, default="auto",
        help="auto: JSON lines when stdout is not a terminal",
    )  # fmt: skip
    parser.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace):
    overrides: dict[str, object] = {}
    for assignment in args.assignments:
        name, value = parse_assignment(assignment)
        overrides[name] = value
    for name, _ in SETTING_FLAGS.values():
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.sync_writes is not None:
        overrides["sync_writes"] = args.sync_writes
    flags = {name: flag for flag, (name, _) in SETTING_FLAGS.items()}
    return load_settings(args.config, overrides=overrides, flags=flags)


def _register_security(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("security (docs/security.md)")
    group.add_argument("--tls-cert", metavar="FILE", help="server certificate chain (PEM)")
    group.add_argument("--tls-key", metavar="FILE", help="private key of --tls-cert (PEM)")
    group.add_argument(
        "--tls-client-ca", metavar="FILE",
        help="mutual TLS: accept only clients with a certificate signed by this CA",
    )  # fmt: skip
    group.add_argument(
        "--auth-tokens", metavar="FILE",
        help="TOML file of bearer tokens and their roles (producer, consumer, admin)",
    )  # fmt: skip
    group.add_argument(
        "--insecure", action="store_true",
        help="allow a non-loopback --host without TLS and tokens (logged as a warning)",
    )  # fmt: skip
    group.add_argument(
        "--export-root", metavar="DIR",
        help="TimerAdmin.Export writes only below DIR (Export is off without it)",
    )  # fmt: skip
    group.add_argument(
        "--export-reserve", metavar="BYTES", type=int,
        help="refuse an export that would leave less free space than this (default 1 GiB)",
    )  # fmt: skip
    group.add_argument(
        "--max-queued-calls-per-caller", metavar="N", type=int,
        help="calls one token (one connection without tokens) may have waiting for a thread "
        "beyond its share; more are refused RESOURCE_EXHAUSTED at once (default 64)",
    )  # fmt: skip


def _register_cluster(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster mode (docs/cluster.md; extra timerwheel[cluster])")
    group.add_argument(
        "--cluster", metavar="NATS_URLS",
        help="run as a node of a cluster over these NATS JetStream servers "
        "(comma-separated, e.g. nats://127.0.0.1:4222,nats://127.0.0.1:4223)",
    )  # fmt: skip
    group.add_argument("--node-name", help="this node's name, unique in the cluster")
    group.add_argument(
        "--partitions", type=int, help="partition count, fixed when the cluster is created "
        "(default 64)",
    )  # fmt: skip
    group.add_argument(
        "--replicas", type=int, help="JetStream replicas of each partition's log (default 3)"
    )
    group.add_argument(
        "--advertise", metavar="HOST[:PORT]",
        help="where other nodes and clients reach this node (default: --host and the port "
        "it listens on; required with --host 0.0.0.0)",
    )  # fmt: skip
    group.add_argument(
        "--cluster-ca", metavar="FILE",
        help="with --tls-cert: the CA of the other nodes' certificates, for the calls nodes "
        "make to each other (default: the system's trusted roots)",
    )  # fmt: skip
    group.add_argument(
        "--nats-creds", metavar="FILE",
        help="a NATS user credentials file (.creds) this node connects with (a user and "
        "password or a token go in the --cluster URLs: nats://USER:PASS@host:4222)",
    )  # fmt: skip
    group.add_argument(
        "--nats-ca", metavar="FILE",
        help="the CA of the NATS servers' certificates: TLS to NATS, required",
    )  # fmt: skip
    group.add_argument(
        "--nats-cert", metavar="FILE", help="a client certificate for mutual TLS to NATS"
    )
    group.add_argument("--nats-key", metavar="FILE", help="the key of --nats-cert")


NATS_FLAGS = ("nats_creds", "nats_ca", "nats_cert", "nats_key")


def cluster_from_args(args: argparse.Namespace, settings):
    """The node's settings, or None without --cluster. Raises SettingsError."""
    from timerwheel.wheels.settings import SettingsError

    if not args.cluster:
        flags = ("node_name", "partitions", "replicas", "advertise", "cluster_ca", *NATS_FLAGS)
        for flag in flags:
            if getattr(args, flag) is not None:
                raise SettingsError(f"--{flag.replace('_', '-')} needs --cluster")
        return None
    if settings.workers:
        raise SettingsError("--cluster runs in one process: leave --workers out")
    try:
        from timerwheel.cluster.settings import NodeSettings
    except ImportError as error:  # nats-py missing
        raise SettingsError(
            f"--cluster needs the cluster extra: pip install 'timerwheel[cluster]' ({error})"
        ) from error
    if not args.node_name:
        raise SettingsError("--cluster needs --node-name (unique in the cluster)")
    urls = tuple(url.strip() for url in args.cluster.split(",") if url.strip())
    given = {
        "partitions": args.partitions, "replicas": args.replicas, "advertise": args.advertise,
        "peer_ca_file": args.cluster_ca,
        **{f"{flag}_file": getattr(args, flag) for flag in NATS_FLAGS},
    }  # fmt: skip
    node = NodeSettings(args.node_name, urls, **{k: v for k, v in given.items() if v is not None})
    node.advertised(settings.host, settings.port)  # a wildcard --host needs --advertise
    return node


def security_from_args(args: argparse.Namespace) -> SecuritySettings:
    values = {
        "tls_cert_file": args.tls_cert, "tls_key_file": args.tls_key,
        "tls_client_ca_file": args.tls_client_ca, "auth_tokens_file": args.auth_tokens,
        "export_root": args.export_root, "export_reserve_bytes": args.export_reserve,
        "max_queued_calls_per_caller": args.max_queued_calls_per_caller,
    }  # fmt: skip
    given = {name: value for name, value in values.items() if value is not None}
    return SecuritySettings(insecure=args.insecure, **given)


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
        security = security_from_args(args)
        cluster = cluster_from_args(args, settings)
    except SettingsError as exc:
        print(f"timerwheel serve: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, args.log_format)
    stop = SignalStop()  # a handler may run inside a wait on it, or inside another handler
    received: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        # heavy imports after the cheap checks
        from timerwheel.security.protection import load_protection
        from timerwheel.server.app import console_host, metrics_host

        try:  # before anything is opened or bound (and before any process starts)
            protection = load_protection(
                settings.host, security, console_host(settings), metrics_host(settings)
            )
        except SettingsError as exc:
            print(f"timerwheel serve: {exc}", file=sys.stderr)
            return 2
        if not settings.workers:
            return _serve_in_process(settings, security, args, stop, received, cluster)
        return _serve_processes(settings, protection, args, stop, received)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stop.close()


def _serve_in_process(
    settings, security, args, stop: SignalStop, received: list[str], cluster=None
) -> int:
    from timerwheel.procs.gil import set_switch_interval
    from timerwheel.procs.heap import prepare_heap_for_serving
    from timerwheel.procs.supervisor import check_port
    from timerwheel.server.app import TimerServer  # heavy imports after the cheap checks

    try:
        # A plain bind first: gRPC's own failed bind also writes a C-core log line.
        check_port(settings.host, settings.port)
        server = TimerServer(settings, security=security, cluster=cluster)
    except Exception as exc:
        return _start_failed(exc, settings)
    server.start()
    try:
        if args.port_file:
            _write_port_file(args.port_file, server.port)
        _write_port_files(args, server)
        prepare_heap_for_serving()  # after the port files: a waiting client is not held up
        set_switch_interval(settings.gil_switch_interval_ms)
        failed = server.engine.health.failed
        while not stop.wait(0.25) and not failed.is_set():
            pass
        if not stop.is_set():  # the writer stopped for good: exit 1 to be restarted
            log.error("server_exiting", reason=server.failure, exit_code=1)
            print(f"timerwheel serve: exiting: {server.failure}", file=sys.stderr)
            return 1
        log.info("signal_received", signal=received[0] if received else "?")
    finally:
        server.stop()
    return 0


def _serve_processes(settings, protection, args, stop: SignalStop, received: list[str]) -> int:
    from timerwheel.procs.supervisor import StartFailed, Supervisor
    from timerwheel.security.protection import log_protection

    log_args = (args.log_level, "json" if _log_is_json(args.log_format) else "console")
    try:
        supervisor = Supervisor(settings, settings.workers, log_args, protection).start()
    except StartFailed as exc:
        return _start_failed(exc, settings)
    log_protection(protection)
    code = 0
    try:
        if args.port_file:
            _write_port_file(args.port_file, supervisor.port)
        _write_port_files(args, supervisor)
        code = supervisor.run(stop)
        if stop.is_set():
            log.info("signal_received", signal=received[0] if received else "?")
    finally:
        supervisor.stop()
    return code


def _start_failed(exc: Exception, settings) -> int:
    """Log the failure, and say on stderr in one line what it means for a person."""
    log.error("server_start_failed", error=str(exc), data_dir=settings.data_dir)
    print(f"timerwheel serve: {start_failure_message(str(exc), settings)}", file=sys.stderr)
    return 1


def start_failure_message(error: str, settings) -> str:
    """The usual reasons a server cannot start, said plainly; else the error itself."""
    if "While lock file" in error or "LOCK:" in error:
        return (
            f"data dir {settings.data_dir} is in use by another timerwheel server (its "
            "RocksDB LOCK is held); stop that server or give another --data-dir"
        )
    if "Address already in use" in error or "Failed to bind" in error:
        return (
            f"port {settings.port} on {settings.host} is already in use; stop what "
            "listens there or give another --port (--port 0 picks a free one)"
        )
    return error


def _log_is_json(log_format: str) -> bool:
    """Children write to the same stdout: they must use the format this process chose."""
    return log_format == "json" or (log_format == "auto" and not sys.stdout.isatty())


def _write_port_files(args: argparse.Namespace, server) -> None:
    """--metrics-port-file and --console-port-file, for what `server` serves."""
    for path, endpoint in (
        (args.metrics_port_file, server.metrics), (args.console_port_file, server.console),
    ):  # fmt: skip
        if path and endpoint is not None:
            _write_port_file(path, endpoint.port)


def _write_port_file(path: str, port: int) -> None:
    """Atomically, so a reader never sees a half-written number."""
    partial = f"{path}.partial"
    with open(partial, "w") as file:
        file.write(f"{port}\n")
    os.replace(partial, path)
