"""Statistics and result records for GPU scripts: median / spread / nearest-rank
percentiles, and Records, the rows a run produces (per phase, with failures and skips kept
as rows, never lost), written as JSON and CSV. Standard library only."""
import csv
import json
import math
import os
import statistics
import time


def median(xs):
    xs = [x for x in xs if isinstance(x, (int, float)) and not math.isnan(x)]
    return statistics.median(xs) if xs else None


def spread(xs):
    """{median, min, max, stdev, n} of the numbers in xs (None entries ignored)."""
    xs = [x for x in xs if isinstance(x, (int, float)) and not math.isnan(x)]
    if not xs:
        return {"median": None, "min": None, "max": None, "stdev": None, "n": 0}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs),
            "stdev": statistics.stdev(xs) if len(xs) > 1 else 0.0, "n": len(xs)}


def percentile(values, q):
    """Nearest-rank percentile (q in [0, 100]) of values (need not be sorted)."""
    s = sorted(values)
    if not s:
        return None
    rank = max(1, int(math.ceil(q / 100.0 * len(s))))
    return s[min(rank, len(s)) - 1]


class Records:
    """Rows by table name ("shares", "latency", ...), phase outcomes, notes."""

    def __init__(self):
        self.tables = {}
        self.phases = []  # {"phase", "status": ok|failed|skipped, "seconds", "detail"}
        self.notes = []
        self.t0 = time.time()

    def add(self, table, **row):
        self.tables.setdefault(table, []).append(row)
        return row

    def phase(self, name, status, seconds, detail=""):
        self.phases.append({"phase": name, "status": status, "seconds": round(seconds, 2), "detail": detail})

    def note(self, text):
        self.notes.append(text)

    def to_json(self, path, **top):
        doc = dict(top)
        doc.update({"phases": self.phases, "notes": self.notes})
        for k, v in self.tables.items():
            doc[k] = v
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True, default=_plain)
        os.replace(tmp, path)
        return doc

    def to_csv(self, path):
        """One CSV of every table: table, then the union of the tables' scalar columns."""
        cols = []
        for rows in self.tables.values():
            for r in rows:
                for k, v in r.items():
                    if k not in cols and not isinstance(v, (list, dict)):
                        cols.append(k)
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["table"] + cols)
            for name, rows in self.tables.items():
                for r in rows:
                    w.writerow([name] + [_cell(r.get(c)) for c in cols])


def _cell(v):
    if isinstance(v, float):
        return "%.6g" % v
    return "" if v is None else v


def _plain(o):
    return str(o)
