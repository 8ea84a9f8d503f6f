#!/usr/bin/env python3
"""Records a fracgpu broker's /metrics where no Prometheus can run (the GPU machine of a
bench run has none), and turns the recording into a real Prometheus's data afterwards.

  tools/metrics_recorder.py record --url http://127.0.0.1:9464/metrics --out FILE \\
      [--interval 1] [--until-file PATH] [--duration S]
      Scrapes every --interval seconds until PATH exists (or S seconds passed, or SIGTERM);
      FILE gets one JSON line per scrape: {"t": unix time, "text": exposition}. A failed
      scrape (the broker restarting between phases) is skipped, never fatal.

  tools/metrics_recorder.py backfill --in FILE --tsdb DIR
      Writes the scrapes as OpenMetrics with timestamps and imports them with
      `promtool tsdb create-blocks-from openmetrics` into DIR. A Prometheus started with
      --storage.tsdb.path=DIR then answers queries over the recorded time range exactly as
      if it had scraped the broker itself (tools/render_dashboard.py draws from it).

  tools/metrics_recorder.py render --in FILE --out PNG [--caption TEXT]
      backfill into a temporary DIR, start Debian's `prometheus` on it, render the
      dashboard over the recorded range with tools/render_dashboard.py, stop it.

Why OpenMetrics without metadata: the recorded text is Prometheus's 0.0.4 format, whose
counter families are named with their _total suffix, which OpenMetrics forbids in a TYPE
line; types do not matter to queries, so samples are imported as untyped, each series in
time order and each sample name contiguous, as the OpenMetrics parser requires.
Cost: one HTTP GET per interval on the recording side.
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\d+)?$")


def record(args):
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    deadline = time.time() + args.duration if args.duration else None
    scrapes = 0
    with open(args.out, "a", encoding="utf-8") as out:
        while not stop["now"]:
            if args.until_file and os.path.exists(args.until_file):
                break
            if deadline and time.time() >= deadline:
                break
            started = time.time()
            try:
                with urllib.request.urlopen(args.url, timeout=max(1.0, args.interval)) as r:
                    text = r.read().decode("utf-8", "replace")
                out.write(json.dumps({"t": started, "text": text}) + "\n")
                out.flush()
                scrapes += 1
            except OSError:
                pass  # no broker right now (between phases): try again next interval
            time.sleep(max(0.0, args.interval - (time.time() - started)))
    print(f"metrics_recorder: {scrapes} scrape(s) in {args.out}", file=sys.stderr)


def read_scrapes(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill: skip it, keep the rest
            if isinstance(doc, dict) and "t" in doc and "text" in doc:
                yield float(doc["t"]), doc["text"]


def to_openmetrics(scrapes):
    """Samples grouped by name, each series in time order; timestamps in seconds."""
    by_name = {}
    for t, text in scrapes:
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = SAMPLE.match(line)
            if not m:
                continue
            name, labels, value = m.group(1), m.group(2) or "", m.group(3)
            by_name.setdefault(name, {}).setdefault(labels, []).append((t, value))
    lines = []
    for name in sorted(by_name):
        for labels, points in by_name[name].items():
            last = None
            for t, value in sorted(points):
                if last is not None and t <= last:
                    continue
                lines.append(f"{name}{labels} {value} {t:.3f}")
                last = t
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def time_range(path):
    times = [t for t, _ in read_scrapes(path)]
    if not times:
        sys.exit(f"metrics_recorder: no scrape in {path}")
    return min(times), max(times)


def backfill(path, tsdb):
    om = pathlib.Path(tsdb).with_suffix(".om")
    om.write_text(to_openmetrics(read_scrapes(path)), encoding="utf-8")
    pathlib.Path(tsdb).mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(tsdb)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"metrics_recorder: promtool failed: {r.stderr.strip()[-2000:]}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render(args):
    start, end = time_range(args.input)
    work = pathlib.Path(tempfile.mkdtemp(prefix="fracgpu-backfill-"))
    try:
        backfill(args.input, work / "tsdb")
        (work / "prometheus.yml").write_text("global: {}\n", encoding="utf-8")
        port = free_port()
        server = subprocess.Popen(
            ["prometheus", f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
             "--storage.tsdb.retention.time=3650d"],
            stdout=subprocess.DEVNULL, stderr=open(work / "prometheus.log", "w"))
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    urllib.request.urlopen(url + "/-/ready", timeout=1)
                    break
                except OSError:
                    time.sleep(0.2)
            cmd = [sys.executable, str(REPO / "tools" / "render_dashboard.py"), "--prometheus", url,
                   "--start", str(start), "--end", str(end), "--scrape-interval",
                   str(max(1, round(args.interval))), "--out", args.out]
            if args.caption:
                cmd += ["--caption", args.caption]
            subprocess.run(cmd, check=True)
        finally:
            server.terminate()
            server.wait(timeout=20)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--url", required=True)
    rec.add_argument("--out", required=True)
    rec.add_argument("--interval", type=float, default=1.0)
    rec.add_argument("--until-file")
    rec.add_argument("--duration", type=float)
    bf = sub.add_parser("backfill")
    bf.add_argument("--in", dest="input", required=True)
    bf.add_argument("--tsdb", required=True)
    rn = sub.add_parser("render")
    rn.add_argument("--in", dest="input", required=True)
    rn.add_argument("--out", required=True)
    rn.add_argument("--caption", default="")
    rn.add_argument("--interval", type=float, default=1.0, help="the recording's interval, s")
    args = parser.parse_args()
    if args.command == "record":
        record(args)
    elif args.command == "backfill":
        backfill(args.input, args.tsdb)
    else:
        render(args)


if __name__ == "__main__":
    main()
