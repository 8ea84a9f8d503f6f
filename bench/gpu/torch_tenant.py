#!/usr/bin/env python3
"""The benchmark's PyTorch tenants (real GPU): the same protocol and JSON as
fracgpu-bench-client's throughput modes (--ready, --barrier, --stop-file, --out; samples
[t, units] at each synchronisation, wall clock), so that the phases treat both alike.

    torch_tenant.py MODE [--seconds S] [--sync-every K] [--warmup-ms W] [--period-ms P]
        [--barrier F] [--ready F] [--stop-file F] [--out F] [--tag T]

MODE: matmul (compute-bound: bf16 8192^2 matmuls), copy (memory-bound: 1 GiB device copies),
train (a training step of a 4096-wide 4-layer MLP: forward, backward, SGD), decode (an
inference decode loop: one token of a 4096-wide 8-layer bf16 MLP per step, synchronised every
token like a serving loop), eager (small-op loop: 64 tiny elementwise ops per sync; the unit
is one op), graph (the train forward captured in a CUDA graph, replayed), onoff (matmul on
for --period-ms, then idle as long). Exit 0 when it measured, 1 on error ({"ok": false}).

--serve DIR: a warm worker, as fracgpu-bench-client's --serve: PyTorch imported, the model
(and those of --prepare's modes) built and warmed once, --ready touched, then one measurement
per round; round N starts when
DIR/go.N appears and holds that round's options (--seconds, --out, --tag, --stop-file,
--warmup-ms, --period-ms, --sync-every) over the command line's. It ends at DIR/quit, SIGTERM
or --idle-s without a round. Waiting polls every millisecond (a few per cent of one core).
"""
import argparse
import json
import math
import os
import sys
import time
import traceback


MODES = ["matmul", "copy", "train", "decode", "eager", "graph", "onoff", "tftrain", "compiled", "encoder", "llm"]
# Real tenants (torch_models.py): latency tenants answer requests, batch kinds measure throughput.
LATENCY_MODES = ("encoder", "llm")


def round_options(p):
    """The options a round of --serve may change (also the command line's)."""
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--sync-every", type=int, default=0, help="units per synchronisation (default per mode)")
    p.add_argument("--warmup-ms", type=float, default=500)
    p.add_argument("--period-ms", type=float, default=100)
    # latency tenants (encoder, llm): as fracgpu-bench-client's latency mode
    p.add_argument("--arrival", choices=["regular", "poisson"], default="regular")
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--think-us", type=float, default=1000)
    p.add_argument("--seed", type=int, default=12345)
    for f in ("--stop-file", "--out", "--tag", "--barrier", "--ready"):
        p.add_argument(f, default="")
    return p


def parse():
    p = round_options(argparse.ArgumentParser())
    p.add_argument("mode", choices=MODES)
    p.add_argument("--serve", default="")
    p.add_argument("--prepare", default="", help="--serve: also build these modes (comma list) before --ready")
    p.add_argument("--idle-s", type=float, default=900)
    return p.parse_args()


def touch(path):
    if path:
        open(path, "w").close()


def emit(args, obj):
    obj.update({"mode": args.mode, "tag": args.tag, "pid": os.getpid()})
    line = json.dumps(obj)
    if args.out:
        tmp = "%s.tmp.%d" % (args.out, os.getpid())
        with open(tmp, "w") as f:
            f.write(line + "\n")
        os.replace(tmp, args.out)
    print(line, flush=True)


def make_unit(torch, mode):
    """(unit function, units per sync, unit name); a latency tenant's unit is one request
    (synchronised) and its "units per sync" the between() hook (torch_models.py)."""
    if mode in LATENCY_MODES or mode in ("tftrain", "compiled"):
        import torch_models  # noqa: PLC0415 - transformers is imported only for the real tenants
        if mode in LATENCY_MODES:
            request, name, between = torch_models.make_latency(torch, mode)
            return request, between, name
        return torch_models.make_batch(torch, mode)
    dev = torch.device("cuda", 0)
    bf = torch.bfloat16
    if mode in ("matmul", "onoff"):
        a = torch.randn(8192, 8192, device=dev, dtype=bf)
        b = torch.randn(8192, 8192, device=dev, dtype=bf)
        c = torch.empty_like(a)
        return (lambda: torch.matmul(a, b, out=c)), 8, "matmul"
    if mode == "copy":
        src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        return (lambda: dst.copy_(src)), 8, "copy"
    if mode == "eager":
        x = torch.ones(256, device=dev)
        return (lambda: x.add_(1e-7)), 64, "op"
    if mode == "decode":
        ws = [torch.randn(4096, 4096, device=dev, dtype=bf) / 64 for _ in range(8)]
        h = torch.randn(1, 4096, device=dev, dtype=bf)

        def token():
            y = h
            for w in ws:
                y = torch.nn.functional.gelu(y @ w)
            h.copy_(y)
        return token, 1, "token"
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(4096, 4096), torch.nn.GELU())]).to(dev)
    x = torch.randn(512, 4096, device=dev)
    if mode == "train":
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)

        def step():
            opt.zero_grad(set_to_none=True)
            model(x).float().pow(2).mean().backward()
            opt.step()
        return step, 2, "step"
    # graph: the forward pass captured once, replayed
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model(x)
    return g.replay, 4, "replay"


def open_unit(args):
    """(torch, unit function, units per sync, unit name, sync), warmed for --warmup-ms."""
    import torch  # noqa: PLC0415 - imported late: --help works without it
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    unit, k, name = make_unit(torch, args.mode)
    warm_mode(args.mode, unit, args.sync_every or k, torch.cuda.synchronize, args.warmup_ms)
    return torch, unit, k, name


def warm_mode(mode, unit, k, sync, warmup_ms):
    if mode in LATENCY_MODES:  # k is the request's between() hook
        end_warm = time.time() + warmup_ms / 1000.0
        for i in range(100000):
            unit()
            if k:
                k()
            if i >= 20 and time.time() >= end_warm:
                break
        return
    warm(unit, k, sync, warmup_ms)


def warm(unit, k, sync, warmup_ms):
    end_warm = time.time() + warmup_ms / 1000.0
    while True:
        for _ in range(k):
            unit()
        sync()
        if time.time() >= end_warm:
            break


def wait_barrier(args):
    t_wait = time.time() + 120
    while args.barrier and not os.path.exists(args.barrier):
        if time.time() > t_wait:
            raise TimeoutError("barrier did not appear")
        time.sleep(0.0005)


def pct(sorted_us, p):
    """Nearest rank, as fracgpu-bench-client's pct()."""
    if not sorted_us:
        return 0.0
    rank = int(math.ceil(p * len(sorted_us)))
    return sorted_us[min(len(sorted_us), max(rank, 1)) - 1]


def ms_fields(prefix, us):
    s = sorted(us)
    out = {prefix + k: pct(s, p) / 1000.0 for k, p in (("p50_ms", 0.5), ("p90_ms", 0.9), ("p99_ms", 0.99),
                                                       ("p999_ms", 0.999))}
    out[prefix + "max_ms"] = s[-1] / 1000.0 if s else 0.0
    return out


def sleep_precise(seconds):
    """Sleep to 200 us before, then spin: the host's wake-up lateness is in no latency."""
    until = time.perf_counter() + seconds
    coarse = until - 0.0002
    now = time.perf_counter()
    if now < coarse:
        time.sleep(coarse - now)
    while time.perf_counter() < until:
        pass


def set_timer_slack():
    try:
        import ctypes  # noqa: PLC0415
        ctypes.CDLL(None, use_errno=True).prctl(29, ctypes.c_ulong(1), 0, 0, 0)  # PR_SET_TIMERSLACK, 1 ns
    except (OSError, AttributeError):
        pass


def measure_latency(args, torch, request, between, name):
    """A latency tenant's measurement, as fracgpu-bench-client's latency mode (latency.cpp):
    after --warmup-ms and five unmeasured requests, --requests requests (or --seconds, or
    --stop-file); regular: --think-us after each reply; poisson: an open loop with exponential
    gaps of mean --think-us (the same sequence for every run of one --seed). Latency counts from
    submission to the end of the request's synchronisation; the Poisson queueing delay from the
    scheduled arrival is kept apart. between() (the LLM's cache crop) runs outside the timing."""
    import random  # noqa: PLC0415
    if args.warmup_ms > 0:
        sleep_precise(args.warmup_ms / 1000.0)
    for _ in range(5):
        request()
        if between:
            between()
    poisson = args.arrival == "poisson"
    rng = random.Random(args.seed)
    lat, queue, resp = [], [], []
    t0 = time.time()
    end = t0 + args.seconds
    clock = time.perf_counter
    arrival = clock()
    while len(lat) < args.requests and time.time() < end:
        if poisson:
            arrival += rng.expovariate(1e6 / max(1.0, args.think_us))
            wait = arrival - clock()
            if wait > 0:
                sleep_precise(wait)
        submit = clock()
        request()
        done = clock()
        lat.append((done - submit) * 1e6)
        if poisson:
            queue.append(max(0.0, (submit - arrival) * 1e6))
            resp.append(queue[-1] + lat[-1])
        if between:
            between()
        if not poisson and args.think_us > 0:
            think_end = done + args.think_us / 1e6
            spent = clock()
            if think_end > spent:
                time.sleep(think_end - spent)
    t1 = time.time()
    touch(args.stop_file)  # the batch tenants of the phase stop measuring
    res = {"ok": bool(lat), "unit": name, "arrival": args.arrival, "t_start": t0, "t_end": t1,
           "requests": len(lat), "latency_from": "submission", "think_us": args.think_us,
           "lat_us": [round(x, 1) for x in lat], "impl": "torch", "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0)}
    res.update(ms_fields("", lat))
    if poisson:
        res.update(ms_fields("queue_", queue))
        res.update(ms_fields("response_", resp))
        res["offered_per_s"] = 1e6 / max(1.0, args.think_us)
        res["queue_us"] = [round(x, 1) for x in queue]
    return res


def measure(args, torch, unit, k, name):
    """One measurement of --seconds (or until --stop-file): the samples and the rate."""
    if args.mode in LATENCY_MODES:
        return measure_latency(args, torch, unit, k, name)
    k = args.sync_every or k
    sync = torch.cuda.synchronize
    t0 = time.time()
    end, period = t0 + args.seconds, args.period_ms / 1000.0
    samples, done = [[0.0, 0]], 0
    while True:
        if args.mode == "onoff" and ((time.time() - t0) % (2 * period)) >= period:
            rel = time.time() - t0
            nxt = (int(rel / (2 * period)) + 1) * 2 * period
            time.sleep(max(0.0, min(nxt, args.seconds) - rel))
        else:
            for _ in range(k):
                unit()
            sync()
            done += k
        t = time.time()
        samples.append([round(t - t0, 6), done])
        if t >= end or (args.stop_file and os.path.exists(args.stop_file)):
            break
    secs = samples[-1][0]
    return {"ok": done > 0, "unit": name, "t_start": t0, "t_end": t0 + secs, "seconds": secs, "units": done,
            "rate": done / secs if secs > 0 else 0.0, "samples": samples, "impl": "torch",
            "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}


def serve(args):
    """--serve: one measurement per round file DIR/go.N until DIR/quit (or --idle-s). A round
    may name another mode (--mode, first): its model is built on first use and kept, so one
    worker serves every kind; with --barrier it warms up, touches --ready and waits."""
    torch, unit, k, name = open_unit(args)
    set_timer_slack()
    units = {args.mode: (unit, k, name)}
    for mode in filter(None, args.prepare.split(",")):  # built while the other workers start, too
        if mode not in units:
            units[mode] = make_unit(torch, mode)
            warm_mode(mode, units[mode][0], 1 if mode not in LATENCY_MODES else units[mode][1],
                      torch.cuda.synchronize, 0)
    touch(args.ready)
    base = argparse.Namespace(**vars(args))
    base.barrier = base.ready = ""
    n, quit_file = 1, os.path.join(args.serve, "quit")
    idle_end = time.time() + args.idle_s
    while time.time() < idle_end and not os.path.exists(quit_file):
        go = os.path.join(args.serve, "go.%d" % n)
        if not os.path.exists(go):
            time.sleep(0.001)
            continue
        with open(go) as f:
            tokens = f.read().split()
        r = argparse.Namespace(**vars(base))
        if tokens[:1] == ["--mode"]:
            r.mode, tokens = tokens[1], tokens[2:]
        r = round_options(argparse.ArgumentParser()).parse_args(tokens, namespace=r)
        r.warmup_ms = r.warmup_ms if "--warmup-ms" in tokens else 0
        try:
            if r.mode not in units:
                units[r.mode] = make_unit(torch, r.mode)
            unit, k, name = units[r.mode]
            if r.warmup_ms > 0 and r.mode not in LATENCY_MODES:  # a latency round pauses instead
                warm(unit, r.sync_every or k, torch.cuda.synchronize, r.warmup_ms)
            touch(r.ready)
            wait_barrier(r)
            res = measure(r, torch, unit, k, name)
        except Exception as e:  # noqa: BLE001 - a failed round is a result; the worker goes on
            traceback.print_exc()
            res = {"ok": False, "error": ("%s: %s" % (type(e).__name__, e))[:1000]}
        emit(r, res)
        n += 1
        idle_end = time.time() + args.idle_s


def main():
    args = parse()
    try:
        if args.serve:
            serve(args)
            return 0
        torch, unit, k, name = open_unit(args)
        touch(args.ready)
        wait_barrier(args)
        res = measure(args, torch, unit, k, name)
    except BaseException as e:  # noqa: BLE001 - every failure becomes a JSON result
        traceback.print_exc()
        res = {"ok": False, "error": ("%s: %s" % (type(e).__name__, e))[:1000]}
    emit(args, res)
    return 0 if res.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
