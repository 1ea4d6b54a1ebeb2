"""deploy/grafana-dashboard.json and deploy/prometheus-alerts.yml cannot rot: every metric
they name is one a live server exposes (scraped over HTTP), the rules pass Prometheus's own
`promtool check rules`, and docs/metrics.md describes every metric the server exposes."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import yaml
from conftest import WAIT_S
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana-dashboard.json"
ALERTS = ROOT / "deploy" / "prometheus-alerts.yml"
METRIC_NAME = re.compile(r"\btimerwheel_[a-z0-9_]+")
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
    for needed in ("timerwheel_fire_lateness_seconds_bucket", "timerwheel_writer_up",
                   "timerwheel_data_dir_free_bytes"):  # fmt: skip
        assert needed in alerts


def test_alert_rules_pass_promtool():
    checked = subprocess.run(
        ["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 6 rules found" in checked.stdout


def test_docs_describe_every_exposed_metric(make_server):
    server = make_server(metrics_port=0)
    docs = (ROOT / "docs" / "metrics.md").read_text()
    for name, kind in exposed_families(server.metrics.port).items():
        shown = name + ("_total" if kind == "counter" else "")
        assert f"`{shown}`" in docs, f"{shown} ({kind}) is not in docs/metrics.md"
