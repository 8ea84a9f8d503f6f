#!/usr/bin/env python3
"""Checks fracgpu's monitoring files (k8s/monitoring) without a cluster or a Prometheus.

--part rules (ctest monitoring_rules):
  `promtool check rules fracgpu-rules.yaml`; `promtool test rules rules_test.yaml`; every
  alert of the rules has a test case where it fires and one where it does not; the
  Prometheus Operator copy (prometheusrule.yaml) holds exactly the rules' groups.
--part config (ctest monitoring_config):
  grafana-dashboard.json is a dashboard (schemaVersion >= 36, the data source as the
  ${datasource} variable on every panel and target, variables gpu/namespace/pod, unique
  panel ids) whose every target and variable query parses as PromQL once the Grafana
  variables are filled in; prometheus-adapter-config.yaml has seriesQuery, resources
  (namespace and pod), name and metricsQuery in every rule, its name.matches fits the
  seriesQuery's metric, and its queries, with the adapter's templates filled in, parse;
  the example HPA (k8s/deploy/examples/inference-hpa.yaml) asks only for metrics the
  adapter serves.
Both parts: every metric the files use is one of metric-names.txt (or a histogram's
_bucket/_sum/_count, a series recorded by fracgpu-rules.yaml, or Prometheus's own `up`),
and every label is one of fracgpu's or a scrape's (job, instance, node).
Expressions are parsed by promtool: all of them written as recording rules into one
temporary rules file and given to `promtool check rules` (one promtool run per part).

--write-prometheusrule rewrites prometheusrule.yaml from fracgpu-rules.yaml.
Prints one line per problem and exits 1 if there is any.
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

from promql_names import legend_labels, names

REPO = pathlib.Path(__file__).resolve().parents[2]
MONITORING = REPO / "k8s" / "monitoring"
HPA = REPO / "k8s" / "deploy" / "examples" / "inference-hpa.yaml"

# Labels of fracgpu's series (metric-names.txt's header) and those a scrape adds.
FRACGPU_LABELS = {"tenant", "gpu", "gpu_uuid", "namespace", "pod", "container", "kind", "version", "le"}
SCRAPE_LABELS = {"job", "instance", "node"}
PROMETHEUS_SERIES = {"up"}  # made by Prometheus for every target
# Concrete values for the dashboard's variables: a pattern for the template variables
# (they are used with =~), durations for Grafana's built-in intervals.
GRAFANA_VALUES = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h", "__range_s": "3600",
                  "__interval_ms": "15000", "gpu": "GPU-.*", "namespace": ".*", "pod": ".*"}
PROMETHEUS_OPERATOR_HEADER = """\
# The rules of fracgpu-rules.yaml as a Prometheus Operator PrometheusRule (kubectl apply -k
# k8s/monitoring). Generated: edit fracgpu-rules.yaml and run
#   tests/monitoring/check_monitoring.py --write-prometheusrule
# (ctest monitoring_rules fails while the two differ). The release label is the one
# kube-prometheus-stack's default ruleSelector looks for, as on the ServiceMonitor.
"""


def read_metric_names(path):
    """{name: (type, scope, optional)} from metric-names.txt."""
    metrics = {}
    for line in path.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if fields:
            metrics[fields[0]] = (fields[1], fields[2], fields[3:] == ["optional"])
    return metrics


def known_series(metrics, rules):
    known = set(PROMETHEUS_SERIES) | set(metrics)
    for name, (kind, _, _) in metrics.items():
        if kind == "histogram":
            known |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    known |= {rule["record"] for group in rules["groups"] for rule in group["rules"] if "record" in rule}
    return known


def check_names(where, expr, known, extra_labels=()):
    used_metrics, used_labels = names(expr)
    problems = [f"{where}: uses {m}, which is not in metric-names.txt nor recorded by fracgpu-rules.yaml"
                for m in sorted(used_metrics - known)]
    allowed = FRACGPU_LABELS | SCRAPE_LABELS | set(extra_labels)
    problems += [f"{where}: uses the label {label}, which no fracgpu series has"
                 for label in sorted(used_labels - allowed)]
    return problems


def promtool_parse(expressions, promtool):
    """[(where, expr)] -> problems: the expressions as recording rules through promtool."""
    if not expressions:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "expressions.yaml"
        rules = [{"record": f"fracgpu_check_{i}", "expr": expr} for i, (_, expr) in enumerate(expressions)]
        path.write_text(yaml.safe_dump({"groups": [{"name": "check", "rules": rules}]}, width=1000))
        result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    if result.returncode == 0:
        return []
    problems = []
    output = result.stdout + result.stderr
    for i, (where, expr) in enumerate(expressions):
        for line in output.splitlines():
            if f'"fracgpu_check_{i}"' in line:
                problems.append(f"{where}: does not parse: {line.strip()} (expr: {expr})")
    return problems or [f"promtool check rules failed: {output.strip()}"]


# --- rules ------------------------------------------------------------------------------

def rule_expressions(rules):
    for group in rules["groups"]:
        for rule in group["rules"]:
            yield f"fracgpu-rules.yaml {rule.get('record') or rule.get('alert')}", rule["expr"]


def check_alert_tests(rules, tests):
    """Every alert fires in some alert_rule_test and stays quiet in another."""
    fired, quiet = set(), set()
    for test in tests.get("tests", []):
        for case in test.get("alert_rule_test", []):
            (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    problems = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            alert = rule.get("alert")
            if alert and alert not in fired:
                problems.append(f"rules_test.yaml: no case where {alert} fires")
            if alert and alert not in quiet:
                problems.append(f"rules_test.yaml: no case where {alert} does not fire")
    return problems


def prometheus_rule(rules):
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "fracgpu", "labels": {"release": "prometheus"}},
            "spec": {"groups": rules["groups"]}}


def write_prometheus_rule(rules):
    text = yaml.safe_dump(prometheus_rule(rules), sort_keys=False, width=100, allow_unicode=True)
    (MONITORING / "prometheusrule.yaml").write_text(PROMETHEUS_OPERATOR_HEADER + text)


def check_rules(promtool, metrics):
    rules_file = MONITORING / "fracgpu-rules.yaml"
    problems = []
    for args in (["check", "rules", rules_file.name], ["test", "rules", "rules_test.yaml"]):
        result = subprocess.run([promtool] + args, cwd=MONITORING, capture_output=True, text=True)
        print(f"promtool {' '.join(args)}: exit {result.returncode}")
        if result.returncode != 0:
            problems.append(f"promtool {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    rules = yaml.safe_load(rules_file.read_text())
    known = known_series(metrics, rules)
    for where, expr in rule_expressions(rules):
        problems += check_names(where, expr, known)
    problems += check_alert_tests(rules, yaml.safe_load((MONITORING / "rules_test.yaml").read_text()))
    operator_copy = MONITORING / "prometheusrule.yaml"
    if not operator_copy.exists() or yaml.safe_load(operator_copy.read_text()) != prometheus_rule(rules):
        problems.append(f"{operator_copy.name} differs from fracgpu-rules.yaml: run "
                        "tests/monitoring/check_monitoring.py --write-prometheusrule")
    alerts = sum(1 for g in rules["groups"] for r in g["rules"] if "alert" in r)
    print(f"rules: {alerts} alerts, {sum(len(g['rules']) for g in rules['groups']) - alerts} records")
    return problems


# --- dashboard --------------------------------------------------------------------------

def fill_grafana_variables(expr):
    return re.sub(r"\$\{?(\w+)\}?", lambda m: GRAFANA_VALUES.get(m.group(1), m.group(0)), expr)


def all_panels(panels):
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def check_dashboard_shape(dash):
    problems = []
    if not isinstance(dash.get("schemaVersion"), int) or dash["schemaVersion"] < 36:
        problems.append(f"dashboard: schemaVersion {dash.get('schemaVersion')} (want >= 36)")
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    source = variables.get("datasource", {})
    if source.get("type") != "datasource" or source.get("query") != "prometheus":
        problems.append("dashboard: no template variable 'datasource' of type datasource for prometheus")
    for name in ("gpu", "namespace", "pod"):
        if variables.get(name, {}).get("type") != "query":
            problems.append(f"dashboard: no query variable '{name}'")
    ids = [p.get("id") for p in all_panels(dash.get("panels", []))]
    if len(ids) != len(set(ids)) or None in ids:
        problems.append(f"dashboard: panel ids missing or repeated: {ids}")
    return problems, variables


def uses_datasource_variable(item):
    return (item.get("datasource") or {}).get("uid") == "${datasource}"


def dashboard_expressions(dash, variables):
    """[(where, expr, legend)] of every target and variable query; problems on the way."""
    problems, found = [], []
    for panel in all_panels(dash.get("panels", [])):
        if panel.get("type") == "row":
            continue
        where = f"dashboard panel {panel.get('id')} '{panel.get('title')}'"
        if not uses_datasource_variable(panel):
            problems.append(f"{where}: datasource is not ${{datasource}}")
        if not panel.get("targets"):
            problems.append(f"{where}: has no targets")
        for target in panel.get("targets", []):
            if not uses_datasource_variable(target):
                problems.append(f"{where} {target.get('refId')}: datasource is not ${{datasource}}")
            if not target.get("expr"):
                problems.append(f"{where} {target.get('refId')}: no expr")
                continue
            found.append((f"{where} {target.get('refId')}", target["expr"], target.get("legendFormat", "")))
    for name, variable in variables.items():
        if variable.get("type") != "query":
            continue
        if not uses_datasource_variable(variable):
            problems.append(f"dashboard variable {name}: datasource is not ${{datasource}}")
        query = variable.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        match = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", query or "")
        if not match:
            problems.append(f"dashboard variable {name}: not a label_values(selector, label) query: {query}")
            continue
        found.append((f"dashboard variable {name}", match.group(1), "{{%s}}" % match.group(2)))
    return problems, found


def check_dashboard(metrics, rules):
    path = MONITORING / "grafana-dashboard.json"
    try:
        dash = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        return [f"{path.name}: not valid JSON: {error}"], []
    problems, variables = check_dashboard_shape(dash)
    more, found = dashboard_expressions(dash, variables)
    problems += more
    known = known_series(metrics, rules)
    expressions = []
    for where, expr, legend in found:
        filled = fill_grafana_variables(expr)
        if "$" in filled:
            problems.append(f"{where}: unknown Grafana variable in {expr}")
            continue
        problems += check_names(where, filled, known)
        problems += [f"{where}: legend uses the label {label}, which no fracgpu series has"
                     for label in sorted(legend_labels(legend) - FRACGPU_LABELS - SCRAPE_LABELS)]
        expressions.append((where, filled))
    print(f"dashboard: {sum(1 for p in all_panels(dash['panels']) if p.get('type') != 'row')} panels, "
          f"{len(expressions)} queries")
    return problems, expressions


# --- prometheus-adapter -----------------------------------------------------------------

ADAPTER_TEMPLATES = {"<<.LabelMatchers>>": 'namespace="ml",pod=~"llm-0|llm-1"',
                     "<<.GroupBy>>": "pod", "<<.GroupBySlice>>": "pod"}


def adapter_rule_problems(where, rule):
    problems = [f"{where}: no {key}" for key in ("seriesQuery", "resources", "name", "metricsQuery")
                if not rule.get(key)]
    if problems:
        return problems, None
    series = names(rule["seriesQuery"])[0]
    if len(series) != 1:
        return [f"{where}: seriesQuery must name one metric, names {sorted(series)}"], None
    metric = series.pop()
    overrides = rule["resources"].get("overrides", {})
    for label in ("namespace", "pod"):
        if (overrides.get(label) or {}).get("resource") != label:
            problems.append(f"{where}: resources.overrides does not map the label {label} to the {label} resource")
    matches = rule["name"].get("matches", "")
    if not re.search(matches, metric):
        problems.append(f"{where}: name.matches {matches!r} does not match {metric}")
    exposed = rule["name"].get("as") or (re.sub(matches, "", metric) if matches else metric)
    return problems, (metric, exposed)


def check_adapter(metrics, rules):
    path = MONITORING / "prometheus-adapter-config.yaml"
    config = yaml.safe_load(path.read_text())
    problems, expressions, exposed = [], [], set()
    known = known_series(metrics, rules)
    adapter_rules = config.get("rules") or []
    if not adapter_rules:
        problems.append(f"{path.name}: no rules")
    for i, rule in enumerate(adapter_rules):
        where = f"{path.name} rule {i}"
        more, metric = adapter_rule_problems(where, rule)
        problems += more
        if metric is None:
            continue
        where = f"{path.name} rule {i} ({metric[1]})"
        if metric[1] in exposed:
            problems.append(f"{where}: serves {metric[1]} a second time")
        exposed.add(metric[1])
        query = rule["metricsQuery"].replace("<<.Series>>", metric[0])
        for template, value in ADAPTER_TEMPLATES.items():
            query = query.replace(template, value)
        if "<<" in query:
            problems.append(f"{where}: unknown template in {rule['metricsQuery']}")
            continue
        for label, text in (("seriesQuery", rule["seriesQuery"]), ("metricsQuery", query)):
            problems += check_names(f"{where} {label}", text, known)
            expressions.append((f"{where} {label}", text))
    problems += check_hpa(exposed)
    print(f"adapter: {len(adapter_rules)} rules, serving {', '.join(sorted(exposed))}")
    return problems, expressions


def check_hpa(exposed):
    """The example HPA's Pods and Object metrics must be ones the adapter config serves."""
    problems = []
    for doc in yaml.safe_load_all(HPA.read_text()):
        if not doc or doc.get("kind") != "HorizontalPodAutoscaler":
            continue
        for metric in doc["spec"].get("metrics", []):
            kind = metric.get("type")
            if kind in ("Pods", "Object"):
                name = metric[kind.lower()]["metric"]["name"]
                if name not in exposed:
                    problems.append(f"{HPA.name}: asks for the {kind} metric {name}, which the adapter "
                                    f"config does not serve ({', '.join(sorted(exposed))})")
            elif kind == "External":
                problems.append(f"{HPA.name}: an External metric; fracgpu's adapter config serves Pods metrics")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("rules", "config", "all"), default="all")
    parser.add_argument("--promtool", default="promtool")
    parser.add_argument("--write-prometheusrule", action="store_true",
                        help="rewrite k8s/monitoring/prometheusrule.yaml from fracgpu-rules.yaml")
    args = parser.parse_args()
    rules = yaml.safe_load((MONITORING / "fracgpu-rules.yaml").read_text())
    if args.write_prometheusrule:
        write_prometheus_rule(rules)
        print(f"wrote {MONITORING / 'prometheusrule.yaml'}")
        return 0
    metrics = read_metric_names(MONITORING / "metric-names.txt")
    problems = []
    if args.part in ("rules", "all"):
        problems += check_rules(args.promtool, metrics)
    if args.part in ("config", "all"):
        more, dashboard_exprs = check_dashboard(metrics, rules)
        problems += more
        more, adapter_exprs = check_adapter(metrics, rules)
        problems += more
        problems += promtool_parse(dashboard_exprs + adapter_exprs, args.promtool)
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
