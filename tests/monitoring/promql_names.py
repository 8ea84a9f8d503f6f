"""The metric and label names a PromQL expression uses, for the monitoring checks
(check_monitoring.py): whether the rules, the dashboard and the adapter config name only
fracgpu's metrics (k8s/monitoring/metric-names.txt) and labels.

Not a parser: promtool decides whether an expression is valid PromQL. This is a scanner
that knows enough of the grammar to tell names apart: strings, durations and numbers are
skipped; a word followed by "(" is a function; the words in a by/without/on/ignoring/
group_left/group_right list and before a matcher's operator inside {...} are label names;
keywords and aggregation operators are neither; every other word is a metric name. Run
over already valid expressions (promtool checks them in the same run), so it does not
diagnose malformed input.
"""
import re

KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
WORD = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
NUMBER = re.compile(r"[0-9.][0-9A-Za-z_.]*")
MATCH_OP = re.compile(r"\s*(=~|!~|!=|=)")
LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _skip_string(expr, i):
    quote = expr[i]
    i += 1
    while i < len(expr) and expr[i] != quote:
        i += 2 if expr[i] == "\\" and quote != "`" else 1
    return i + 1


def _next_char(expr, i):
    while i < len(expr) and expr[i].isspace():
        i += 1
    return (expr[i], i) if i < len(expr) else ("", i)


def _label_list(expr, i, labels):
    """Reads "(a, b)" at expr[i] == "(" into labels; returns the index after ")"."""
    end = expr.index(")", i)
    labels.update(name for name in re.split(r"[\s,]+", expr[i + 1:end]) if name)
    return end + 1


def _matchers(expr, i, labels):
    """Reads "{a="x", b=~"y"}" at expr[i] == "{"; returns the index after "}"."""
    i += 1
    while i < len(expr) and expr[i] != "}":
        c = expr[i]
        if c in "\"'`":
            i = _skip_string(expr, i)
            continue
        word = LABEL.match(expr, i)
        if word:
            if MATCH_OP.match(expr, word.end()):
                labels.add(word.group())
            i = word.end()
            continue
        i += 1
    return i + 1


def names(expr):
    """(metric names, label names) that expr uses."""
    metrics, labels = set(), set()
    i = 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'`":
            i = _skip_string(expr, i)
        elif c == "#":
            end = expr.find("\n", i)
            i = len(expr) if end < 0 else end
        elif c == "[":
            i = expr.index("]", i) + 1
        elif c == "{":
            i = _matchers(expr, i, labels)
        elif c.isdigit() or (c == "." and i + 1 < len(expr) and expr[i + 1].isdigit()):
            i = NUMBER.match(expr, i).end()
        elif WORD.match(expr, i):
            word = WORD.match(expr, i).group()
            i += len(word)
            following, at = _next_char(expr, i)
            if word in GROUPING:
                if following == "(":
                    i = _label_list(expr, at, labels)
            elif following == "(" or word in KEYWORDS or word in AGGREGATIONS:
                pass  # a function or an operator
            else:
                metrics.add(word)
        else:
            i += 1
    return metrics, labels


def legend_labels(legend_format):
    """The label names a Grafana legend format ("{{tenant}} GPU {{gpu}}") refers to."""
    return set(re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", legend_format or ""))
