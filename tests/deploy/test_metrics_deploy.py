"""deploy/grafana-dashboard.json and deploy/prometheus-alerts.yml cannot rot: every metric
they name is one a live server exposes (scraped over HTTP), the rules pass Prometheus's own
`promtool check rules` (and the CPU-ceiling rule its rule unit test), and docs/metrics.md
describes every metric the server exposes."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml
from helpers.waits import WAIT_S
from prometheus_client.parser import text_string_to_metric_families

from timerwheel.observability.thread_cpu import GIL_KINDS

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana-dashboard.json"
ALERTS = ROOT / "deploy" / "prometheus-alerts.yml"
# timerwheel's own families, and the per-call gRPC ones (grpc-ecosystem's names)
METRIC_NAME = re.compile(r"\b(?:timerwheel|grpc_server)_[a-z0-9_]+")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def exposed_families(port: int) -> dict[str, str]:
    """Family name -> type, as a live server exposes them."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=WAIT_S) as answer:
        text = answer.read().decode()
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def sample_names(families: dict[str, str]) -> set[str]:
    """The names a query may use: a counter's _total, a histogram's _bucket/_count/_sum."""
    return {name + suffix for name, kind in families.items() for suffix in SUFFIXES[kind]}


def expressions(node) -> list[str]:
    """Every `expr` string anywhere in a parsed JSON or YAML document."""
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return found + [e for value in node.values() for e in expressions(value)]
    if isinstance(node, list):
        return [e for item in node for e in expressions(item)]
    return []


def names_in(document) -> set[str]:
    return {name for expr in expressions(document) for name in METRIC_NAME.findall(expr)}


def test_dashboard_and_alerts_use_only_exposed_metrics(make_server):
    server = make_server(metrics_port=0)
    exposed = sample_names(exposed_families(server.metrics.port))
    dashboard = names_in(json.loads(DASHBOARD.read_text()))
    alerts = names_in(yaml.safe_load(ALERTS.read_text()))
    assert len(dashboard) >= 15 and len(alerts) >= 4  # the extraction found them at all
    assert dashboard - exposed == set()
    assert alerts - exposed == set()
    for needed in ("grpc_server_handled_total", "grpc_server_handling_seconds_bucket"):
        assert needed in dashboard  # request rate and latency panels
    for needed in ("timerwheel_fire_lateness_seconds_bucket", "timerwheel_writer_up",
                   "timerwheel_data_dir_free_bytes"):  # fmt: skip
        assert needed in alerts


@pytest.mark.system  # promtool
def test_alert_rules_pass_promtool():
    checked = subprocess.run(
        ["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 7 rules found" in checked.stdout


@pytest.mark.system  # promtool
def test_the_cpu_ceiling_alert_counts_the_python_threads_only(tmp_path):
    """promtool's rule unit test: 0.9 of a core in the engine's Python threads for 15
    minutes fires; 0.5 in Python plus 0.5 in RocksDB's compactions (no GIL) does not."""
    [rule] = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]
              if r["alert"] == "TimerwheelNearCpuCeiling"]  # fmt: skip
    [kinds] = re.findall(r'thread=~"([^"]+)"', rule["expr"])
    assert set(kinds.split("|")) == set(GIL_KINDS)  # the loadtest's ceiling counts the same

    def cpu(instance: str, thread: str, seconds_a_minute: int) -> dict:
        name = f'timerwheel_thread_cpu_seconds_total{{instance="{instance}", thread="{thread}"}}'
        return {"series": name, "values": f"0+{seconds_a_minute}x40"}

    test = {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                cpu("busy", "writer", 36), cpu("busy", "grpc_calls", 18),
                cpu("busy", "rocksdb_compaction", 30),
                cpu("calm", "writer", 30), cpu("calm", "rocksdb_compaction", 30),
            ],
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": rule["alert"], "exp_alerts": []},  # not yet
                {"eval_time": "25m", "alertname": rule["alert"], "exp_alerts": [{
                    "exp_labels": {"instance": "busy", "severity": "ticket"},
                    "exp_annotations": {
                        "summary": "timerwheel's Python threads on busy use 90% of a core",
                        "description": rule["annotations"]["description"],
                    },
                }]},
            ],
        }],
    }  # fmt: skip
    tests = tmp_path / "cpu-ceiling-test.yml"
    tests.write_text(yaml.safe_dump(test))
    checked = subprocess.run(
        ["promtool", "test", "rules", str(tests)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_docs_describe_every_exposed_metric(make_server):
    server = make_server(metrics_port=0)
    docs = (ROOT / "docs" / "metrics.md").read_text()
    for name, kind in exposed_families(server.metrics.port).items():
        shown = name + ("_total" if kind == "counter" else "")
        assert f"`{shown}`" in docs, f"{shown} ({kind}) is not in docs/metrics.md"
