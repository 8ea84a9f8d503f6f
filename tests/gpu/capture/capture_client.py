#!/usr/bin/env python3
"""fracgpu capture checks: a PyTorch client that captures and replays CUDA graphs.

Issue "CUDA graphs and stream capture must survive sharing": a capture under fracgpu must
not fail because another tenant competes for the GPU. This client captures CUDA graphs in
one of four ways (--mode) and verifies every capture against eager execution:

  graph               torch.cuda.graph() around a small MLP forward (default capture_error_mode,
                      i.e. "global": any unsafe CUDA call from any thread of the process, the
                      shim's own threads included, invalidates the capture)
  graph_thread_local  the same with capture_error_mode="thread_local"
  compile             torch.compile(mode="reduce-overhead") (inductor + cudagraph trees): each
                      of --repeat distinct batch sizes must get its own CUDA graph recorded
                      (counted through torch.cuda.CUDAGraph.capture_end), over --compile-rounds
                      rounds separated by torch._dynamo.reset(); a compile failure is a failure
  serving             a serving loop: one graph per batch size (--batch-sizes, captured largest
                      first into one memory pool from torch.cuda.graph_pool_handle()), then
                      replays in a random order for --seconds, each output checked against a
                      precomputed eager reference

--repeat N captures from scratch N times within the process (serving: N sets of graphs),
each followed by --verify-replays replays with fresh inputs compared with eager results
(max |replay - eager| / max |eager| <= --tol; bf16 default 5e-2; NaN/Inf fail). Then, if
--seconds > 0, it creates --ready, waits for --barrier and replays the last graph(s) for
--seconds (or until --stop-file appears), synchronizing every --sync-every replays and
taking a wall-clock sample each time (so a report can compute the replay rate over a window
shared with other tenants), with a verification every --verify-every-s.

ONE JSON line on stdout at the end (everything else goes to stderr, C-level output included):
{"ok", "mode", "captures", "expected_captures", "failures", "errors", "replays",
"replay_rate_per_s", "samples", "t_start", "t_end", "max_rel_err", ...}; also written to --out.
Exit status 0 iff ok: no failure, every expected capture verified, replays ran if asked for.
--watchdog-s S writes the JSON (ok false, the stage it was in) and exits 3 after S seconds, and
dumps every thread's Python stack to stderr shortly before (faulthandler).
"""
import argparse
import faulthandler
import os
import random
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compute"))
from matmul_tenant import add_phase_args, import_torch, run_main, touch, wait_barrier, write_result  # noqa: E402

MODES = ("graph", "graph_thread_local", "compile", "serving")
DEFAULT_TOL = {"bf16": 5e-2, "fp16": 2e-2, "fp32": 1e-3}
MAX_ERRORS = 5

# Shared with the watchdog thread: what the main thread is doing and what it has counted.
STATE = {"stage": "start", "captures": 0, "expected": None, "failures": 0, "errors": [], "replays": 0}
STATE_LOCK = threading.Lock()
RESULT_LOCK = threading.Lock()
RESULT_CLAIMED = [False]  # the main thread or the watchdog: whoever claims it first writes the JSON
REAL_STDOUT = sys.stdout


def claim_result():
    with RESULT_LOCK:
        if RESULT_CLAIMED[0]:
            return False
        RESULT_CLAIMED[0] = True
        return True


def log(msg):
    sys.stderr.write("[capture_client %d] %s\n" % (os.getpid(), msg))
    sys.stderr.flush()


def stage(name):
    STATE["stage"] = name
    log(name)


def fail(msg):
    """Counts one failure and keeps the first MAX_ERRORS messages."""
    with STATE_LOCK:
        STATE["failures"] += 1
        if len(STATE["errors"]) < MAX_ERRORS:
            STATE["errors"].append(msg[:400])
    log("FAILURE: " + msg[:2000])


def exc_text(exc):
    return "%s: %s" % (type(exc).__name__, str(exc).strip().replace("\n", " | "))


# ---------------------------------------------------------------- helpers
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", required=True, choices=MODES)
    p.add_argument("--repeat", type=int, default=20, help="captures from scratch (default 20)")
    p.add_argument("--seconds", type=float, default=0.0, help="timed replay loop after the captures (default 0: none)")
    p.add_argument("--hidden", type=int, default=1024, help="MLP width (default 1024)")
    p.add_argument("--layers", type=int, default=4, help="Linear layers (default 4)")
    p.add_argument("--batch", type=int, default=256, help="batch of the graph modes (default 256)")
    p.add_argument("--dtype", choices=sorted(DEFAULT_TOL), default="bf16")
    p.add_argument("--tol", type=float, default=None, help="max relative error (default: per dtype)")
    p.add_argument("--verify-replays", type=int, default=3, help="verified replays after each capture (default 3)")
    p.add_argument("--verify-every-s", type=float, default=1.0, help="verification period in the timed loop")
    p.add_argument("--sync-every", type=int, default=8, help="replays between synchronizations in the timed loop")
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32", help="serving: batch sizes (default 1,2,4,8,16,32)")
    p.add_argument("--compile-rounds", type=int, default=2, help="compile: torch._dynamo.reset() rounds (default 2)")
    p.add_argument("--calls-per-shape", type=int, default=3, help="compile: calls per new shape (warm-up, record, replay)")
    p.add_argument("--max-consecutive-failures", type=int, default=3, help="stop capturing after this many in a row")
    p.add_argument("--stop-file", default="", help="end the timed loop early when this file exists")
    p.add_argument("--watchdog-s", type=float, default=0.0, help="give up (JSON, exit 3) after this many seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", type=int, default=0)
    add_phase_args(p)
    args = p.parse_args(argv)
    if args.repeat < 1 or args.hidden < 1 or args.layers < 1 or args.batch < 1 or args.sync_every < 1:
        p.error("--repeat, --hidden, --layers, --batch and --sync-every must be positive")
    if args.seconds < 0 or args.verify_replays < 1 or args.compile_rounds < 1 or args.calls_per_shape < 2:
        p.error("--seconds >= 0, --verify-replays >= 1, --compile-rounds >= 1, --calls-per-shape >= 2")
    try:
        args.sizes = sorted({int(x) for x in args.batch_sizes.split(",") if x.strip()}, reverse=True)
    except ValueError:
        p.error("--batch-sizes must be a comma-separated list of integers")
    if not args.sizes or min(args.sizes) < 1:
        p.error("--batch-sizes must list positive integers")
    if args.tol is None:
        args.tol = DEFAULT_TOL[args.dtype]
    return args


class GraphCounter(object):
    """Counts CUDA graph captures and replays process-wide (inductor's cudagraph trees too) by
    wrapping torch.cuda.CUDAGraph.capture_end / replay. available is False if that failed."""

    def __init__(self, torch):
        self.captured = 0
        self.replayed = 0
        self.available = False
        try:
            cls = torch.cuda.CUDAGraph
            orig_end, orig_replay = cls.capture_end, cls.replay
            counter = self

            def capture_end(self_, *a, **k):
                r = orig_end(self_, *a, **k)
                counter.captured += 1
                return r

            def replay(self_, *a, **k):
                r = orig_replay(self_, *a, **k)
                counter.replayed += 1
                return r

            cls.capture_end = capture_end
            cls.replay = replay
            self.available = True
        except Exception as exc:  # noqa: BLE001 - the count is then just unavailable
            log("cannot wrap torch.cuda.CUDAGraph (%s): graph counts unavailable" % exc_text(exc))


def make_model(torch, args, dev, dtype):
    torch.manual_seed(args.seed)
    mods = []
    for i in range(args.layers):
        mods.append(torch.nn.Linear(args.hidden, args.hidden, bias=True))
        if i + 1 < args.layers:
            mods.append(torch.nn.GELU())
    model = torch.nn.Sequential(*mods).to(device=dev, dtype=dtype).eval()
    for prm in model.parameters():
        prm.requires_grad_(False)
    return model


def rel_err(torch, out, ref):
    """max |out - ref| / max |ref| as a float (inf if out has NaN/Inf). Synchronizes."""
    o, r = out.float(), ref.float()
    if not bool(torch.isfinite(o).all()):
        return float("inf")
    scale = float(r.abs().max().clamp_min(1e-6))
    return float((o - r).abs().max()) / scale


class Errs(object):
    def __init__(self):
        self.max_rel = 0.0

    def check(self, torch, out, ref, tol, what):
        e = rel_err(torch, out, ref)
        self.max_rel = max(self.max_rel, e)
        if not e <= tol:
            fail("%s: replay output differs from eager: max rel err %.3g > %.3g" % (what, e, tol))
            return False
        return True


def side_stream_warmup(torch, fn, n=2):
    """The warm-up PyTorch asks for before a capture: a few eager runs on a side stream."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(n):
            fn()
    torch.cuda.current_stream().wait_stream(s)


def capture(torch, fn, error_mode=None, pool=None):
    g = torch.cuda.CUDAGraph()
    kw = {}
    if error_mode:
        kw["capture_error_mode"] = error_mode
    if pool is not None:
        kw["pool"] = pool
    with torch.cuda.graph(g, **kw):
        out = fn()
    return g, out


class Timed(object):
    """The timed replay loop's bookkeeping: samples (seconds since t0, replays) after every sync."""

    def __init__(self, args):
        self.args = args
        self.samples = [(0.0, 0)]
        self.n = 0
        self.t0 = None
        self.stopped_by_file = False

    def start(self, torch):
        touch(self.args.ready)
        self.barrier_wait_s = wait_barrier(self.args.barrier, self.args.barrier_timeout)
        torch.cuda.synchronize()
        self.t0 = time.time()
        self.deadline = self.t0 + self.args.seconds
        self.next_verify = self.t0 + self.args.verify_every_s

    def tick(self, done):
        """After a synchronize: records a sample; True when the loop should end."""
        self.n += done
        STATE["replays"] = self.n
        t = time.time()
        self.samples.append((round(t - self.t0, 5), self.n))
        if t >= self.deadline:
            return True
        if self.args.stop_file and os.path.exists(self.args.stop_file):
            self.stopped_by_file = True
            return True
        return False

    def verify_due(self):
        t = time.time()
        if t >= self.next_verify:
            self.next_verify = t + self.args.verify_every_s
            return True
        return False

    def result(self):
        if self.t0 is None:
            return {"replays": 0, "replay_rate_per_s": None, "samples": [], "seconds": 0.0}
        secs = self.samples[-1][0]
        return {"replays": self.n, "seconds": secs, "t_start": round(self.t0, 6), "t_end": round(self.t0 + secs, 6),
                "replay_rate_per_s": round(self.n / secs, 3) if secs > 0 else None,
                "samples": [list(s) for s in self.samples], "stopped_by_file": self.stopped_by_file,
                "barrier_wait_s": round(self.barrier_wait_s, 4)}


def event_ms_per_replay(torch, replay, n=20):
    """GPU time of n replays between two events, per replay (includes waits under contention)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        replay()
    b.record()
    b.synchronize()
    return round(a.elapsed_time(b) / n, 4)


# ---------------------------------------------------------------- modes
def run_graph(torch, args, dev, dtype, model, counter, errs, info):
    error_mode = "thread_local" if args.mode == "graph_thread_local" else None
    info["capture_error_mode"] = error_mode or "global (default)"
    STATE["expected"] = args.repeat
    static_x = torch.randn(args.batch, args.hidden, device=dev, dtype=dtype)
    captures, consecutive, capture_ms = 0, 0, []
    last = None
    for i in range(args.repeat):
        stage("capture %d/%d" % (i + 1, args.repeat))
        try:
            side_stream_warmup(torch, lambda: model(static_x))
            t = time.perf_counter()
            g, static_y = capture(torch, lambda: model(static_x), error_mode)
            capture_ms.append((time.perf_counter() - t) * 1000.0)
            good = True
            for k in range(args.verify_replays):
                static_x.copy_(torch.randn(args.batch, args.hidden, device=dev, dtype=dtype))
                g.replay()
                out = static_y.clone()
                ref = model(static_x)
                good = errs.check(torch, out, ref, args.tol, "capture %d replay %d" % (i, k)) and good
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a failed capture is a result
            traceback.print_exc()
            fail("capture %d: %s" % (i, exc_text(exc)))
            good = False
            g = static_y = None
            try:
                torch.cuda.synchronize()
            except Exception as exc2:  # noqa: BLE001
                fail("capture %d: synchronize after the failure: %s" % (i, exc_text(exc2)))
        if good:
            captures += 1
            consecutive = 0
            STATE["captures"] = captures
            last = (g, static_y)
        else:
            consecutive += 1
            if consecutive >= args.max_consecutive_failures:
                fail("stopped after %d consecutive failed captures (%d of %d tried)" % (consecutive, i + 1, args.repeat))
                break
        if last is None or last[0] is not g:
            del g, static_y
    info["capture_ms_median"] = round(sorted(capture_ms)[len(capture_ms) // 2], 3) if capture_ms else None
    info["capture_ms_max"] = round(max(capture_ms), 3) if capture_ms else None

    timed = Timed(args)
    if args.seconds > 0:
        if last is None:
            fail("no verified graph to replay in the timed loop")
        else:
            g, static_y = last
            stage("timed replay loop, %.1f s" % args.seconds)
            info["event_ms_per_replay"] = event_ms_per_replay(torch, g.replay)
            x_ref = torch.randn(args.batch, args.hidden, device=dev, dtype=dtype)
            y_ref = model(x_ref)
            static_x.copy_(x_ref)
            timed.start(torch)
            while True:
                for _ in range(args.sync_every):
                    g.replay()
                torch.cuda.synchronize()
                if timed.tick(args.sync_every):
                    break
                if timed.verify_due():
                    errs.check(torch, static_y, y_ref, args.tol, "timed loop after %d replays" % timed.n)
            errs.check(torch, static_y, y_ref, args.tol, "timed loop, final")
            # Fresh input once more: the replay still reads its static input.
            static_x.copy_(torch.randn(args.batch, args.hidden, device=dev, dtype=dtype))
            g.replay()
            errs.check(torch, static_y.clone(), model(static_x), args.tol, "timed loop, fresh input")
    return captures, args.repeat, timed


def run_serving(torch, args, dev, dtype, model, counter, errs, info):
    sizes = args.sizes  # largest first, as serving engines capture
    max_bs = sizes[0]
    rng = random.Random(args.seed)
    static_in = torch.zeros(max_bs, args.hidden, device=dev, dtype=dtype)
    tests = {}  # bs -> [(x, eager reference as float32, scale)]
    for bs in sizes:
        tests[bs] = []
        for _ in range(4):
            x = torch.randn(bs, args.hidden, device=dev, dtype=dtype)
            ref = model(x).float()
            tests[bs].append((x, ref, float(ref.abs().max().clamp_min(1e-6))))
    torch.cuda.synchronize()
    info["batch_sizes"] = sizes
    STATE["expected"] = args.repeat * len(sizes)
    captures, consecutive = 0, 0
    graphs = {}
    for r in range(args.repeat):
        stage("capture set %d/%d (batch sizes %s)" % (r + 1, args.repeat, ",".join(map(str, sizes))))
        graphs = {}
        pool = torch.cuda.graph_pool_handle()
        set_ok = 0
        for bs in sizes:
            view = static_in[:bs]
            try:
                side_stream_warmup(torch, lambda v=view: model(v), n=1)
                g, out = capture(torch, lambda v=view: model(v), None, pool)
                graphs[bs] = (g, out)
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                fail("set %d batch %d: capture: %s" % (r, bs, exc_text(exc)))
                try:
                    torch.cuda.synchronize()
                except Exception as exc2:  # noqa: BLE001
                    fail("set %d batch %d: synchronize after the failure: %s" % (r, bs, exc_text(exc2)))
        # Verify every graph of the set in a random order (graphs share one pool).
        order = [bs for bs in sizes if bs in graphs] * args.verify_replays
        rng.shuffle(order)
        bad = set()
        for bs in order:
            g, out = graphs[bs]
            x, ref, _ = tests[bs][rng.randrange(len(tests[bs]))]
            try:
                static_in[:bs].copy_(x)
                g.replay()
                if not errs.check(torch, out, ref, args.tol, "set %d batch %d" % (r, bs)):
                    bad.add(bs)
            except Exception as exc:  # noqa: BLE001
                fail("set %d batch %d: replay: %s" % (r, bs, exc_text(exc)))
                bad.add(bs)
        for bs in list(graphs):
            if bs in bad:
                del graphs[bs]
            else:
                set_ok += 1
        captures += set_ok
        STATE["captures"] = captures
        if set_ok == 0:
            consecutive += 1
            if consecutive >= args.max_consecutive_failures:
                fail("stopped after %d capture sets without a verified graph" % consecutive)
                break
        else:
            consecutive = 0

    timed = Timed(args)
    if args.seconds > 0:
        if not graphs:
            fail("no verified graph to replay in the serving loop")
        else:
            live = sorted(graphs)
            errt = {bs: torch.zeros((), device=dev, dtype=torch.float32) for bs in live}
            per_bs = {bs: 0 for bs in live}
            stage("serving loop, %.1f s, random order over batch sizes %s" % (args.seconds, live))
            timed.start(torch)
            pending = 0
            while True:
                bs = live[rng.randrange(len(live))]
                g, out = graphs[bs]
                x, ref, scale = tests[bs][rng.randrange(len(tests[bs]))]
                static_in[:bs].copy_(x)
                g.replay()
                e = (out.float() - ref).abs().amax() / scale
                e = torch.nan_to_num(e, nan=float("inf"))
                torch.maximum(errt[bs], e, out=errt[bs])
                per_bs[bs] += 1
                pending += 1
                if pending >= args.sync_every:
                    torch.cuda.synchronize()
                    done = timed.tick(pending)
                    pending = 0
                    if done:
                        break
            for bs in live:
                e = float(errt[bs])
                errs.max_rel = max(errs.max_rel, e)
                if not e <= args.tol:
                    fail("serving loop batch %d: a replay differed from eager: max rel err %.3g > %.3g" % (
                        bs, e, args.tol))
            info["replays_per_batch_size"] = {str(bs): n for bs, n in per_bs.items()}
    return captures, args.repeat * len(sizes), timed


def run_compile(torch, args, dev, dtype, model, counter, errs, info):
    import logging  # noqa: PLC0415

    stage("compile setup")
    import torch._dynamo  # noqa: PLC0415,F401 - a failure here is the mode's failure
    try:
        from torch._dynamo.utils import counters  # noqa: PLC0415
    except Exception:  # noqa: BLE001
        counters = None
    torch._dynamo.config.suppress_errors = False  # a compile failure must raise, not fall back to eager
    skip_msgs = []

    class SkipHandler(logging.Handler):
        def emit(self, record):
            try:
                m = record.getMessage()
            except Exception:  # noqa: BLE001
                return
            if "cudagraph" in m.lower() and "skip" in m.lower() and len(skip_msgs) < 5:
                skip_msgs.append(m[:300])

    logging.getLogger("torch").addHandler(SkipHandler())
    try:
        torch._logging.set_logs(perf_hints=True)  # inductor's "skipping cudagraphs due to ..." lines
    except Exception:  # noqa: BLE001
        pass
    if not counter.available:
        info["note"] = "graph recordings cannot be counted (torch.cuda.CUDAGraph not wrappable)"

    STATE["expected"] = args.repeat
    shapes = [16 + 8 * i for i in range(args.repeat)]  # distinct, >= 2 (no 0/1 specialisation)
    rounds = min(args.compile_rounds, len(shapes))
    per_round = [shapes[r::rounds] for r in range(rounds)]
    info["compile_shapes"] = per_round
    rng = random.Random(args.seed)
    captures, consecutive, compile_s = 0, 0, []
    cmodel, last_shapes = None, []
    stop = False
    for rnd, round_shapes in enumerate(per_round):
        if stop:
            break
        try:
            torch._dynamo.reset()
        except Exception as exc:  # noqa: BLE001
            fail("round %d: torch._dynamo.reset(): %s" % (rnd, exc_text(exc)))
        cmodel = torch.compile(model, mode="reduce-overhead")
        last_shapes = []
        for bs in round_shapes:
            stage("compile round %d/%d, batch %d" % (rnd + 1, rounds, bs))
            good = True
            try:
                xs = [torch.randn(bs, args.hidden, device=dev, dtype=dtype) for _ in range(2)]
                refs = [model(x) for x in xs]
                before = counter.captured
                t = time.time()
                for _ in range(args.calls_per_shape):  # warm-up, record, replay
                    torch.compiler.cudagraph_mark_step_begin()
                    y = cmodel(xs[0])
                y = y.clone()
                torch.cuda.synchronize()
                compile_s.append(time.time() - t)
                recorded = counter.captured - before
                if counter.available and recorded < 1:
                    reason = "; ".join(skip_msgs) or (
                        "inductor counters: %s" % dict(counters["inductor"]) if counters is not None else "")
                    fail("round %d batch %d: no CUDA graph was recorded (cudagraphs skipped?) %s" % (rnd, bs, reason))
                    good = False
                good = errs.check(torch, y, refs[0], args.tol, "round %d batch %d" % (rnd, bs)) and good
                torch.compiler.cudagraph_mark_step_begin()
                y2 = cmodel(xs[1]).clone()  # a replay with other values in the same shape
                good = errs.check(torch, y2, refs[1], args.tol, "round %d batch %d, second input" % (rnd, bs)) and good
            except Exception as exc:  # noqa: BLE001 - includes inductor/triton compile failures
                traceback.print_exc()
                fail("round %d batch %d: %s" % (rnd, bs, exc_text(exc)))
                good = False
                try:
                    torch.cuda.synchronize()
                except Exception as exc2:  # noqa: BLE001
                    fail("round %d batch %d: synchronize after the failure: %s" % (rnd, bs, exc_text(exc2)))
            if good:
                captures += 1
                consecutive = 0
                last_shapes.append(bs)
                STATE["captures"] = captures
            else:
                consecutive += 1
                if consecutive >= args.max_consecutive_failures:
                    fail("stopped after %d consecutive failed shapes" % consecutive)
                    stop = True
                    break
    info["first_shape_s"] = [round(x, 2) for x in compile_s[:1]]
    info["shape_s_median"] = round(sorted(compile_s)[len(compile_s) // 2], 3) if compile_s else None
    if counters is not None:
        try:
            info["inductor_counters"] = {k: v for k, v in dict(counters["inductor"]).items()
                                         if "cudagraph" in k or "fxgraph" in k}
        except Exception:  # noqa: BLE001
            pass
    if skip_msgs:
        info["cudagraph_skip_messages"] = skip_msgs

    timed = Timed(args)
    if args.seconds > 0:
        if not last_shapes or cmodel is None:
            fail("no verified compiled shape to replay in the timed loop")
        else:
            tests = {}
            for bs in last_shapes:
                x = torch.randn(bs, args.hidden, device=dev, dtype=dtype)
                ref = model(x).float()
                tests[bs] = (x, ref, float(ref.abs().max().clamp_min(1e-6)))
            errt = torch.zeros((), device=dev, dtype=torch.float32)
            stage("timed loop over compiled shapes %s, %.1f s" % (last_shapes, args.seconds))
            timed.start(torch)
            pending = 0
            while True:
                bs = last_shapes[rng.randrange(len(last_shapes))]
                x, ref, scale = tests[bs]
                torch.compiler.cudagraph_mark_step_begin()
                y = cmodel(x)
                e = torch.nan_to_num((y.float() - ref).abs().amax() / scale, nan=float("inf"))
                torch.maximum(errt, e, out=errt)
                pending += 1
                if pending >= args.sync_every:
                    torch.cuda.synchronize()
                    done = timed.tick(pending)
                    pending = 0
                    if done:
                        break
            e = float(errt)
            errs.max_rel = max(errs.max_rel, e)
            if not e <= args.tol:
                fail("timed loop: a compiled replay differed from eager: max rel err %.3g > %.3g" % (e, args.tol))
    return captures, args.repeat, timed


# ---------------------------------------------------------------- main
def measure(args):
    stage("importing torch")
    torch, import_s = import_torch()
    stage("setup (torch %s)" % torch.__version__)
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    counter = GraphCounter(torch)
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(dev),
            "import_s": round(import_s, 3)}
    errs = Errs()
    t_setup = time.time()
    model = make_model(torch, args, dev, dtype)
    torch.cuda.synchronize()
    info["setup_s"] = round(time.time() - t_setup, 3)
    t_run = time.time()
    runner = {"graph": run_graph, "graph_thread_local": run_graph, "compile": run_compile,
              "serving": run_serving}[args.mode]
    with torch.no_grad():
        try:
            captures, expected, timed = runner(torch, args, dev, dtype, model, counter, errs, info)
        except Exception as exc:  # noqa: BLE001 - anything outside the per-capture handlers
            traceback.print_exc()
            fail("%s: %s" % (STATE["stage"], exc_text(exc)))
            captures, expected, timed = STATE["captures"], None, Timed(args)
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        fail("final synchronize: %s" % exc_text(exc))
    info["run_s"] = round(time.time() - t_run, 3)
    tres = timed.result()
    failures = STATE["failures"]
    ok = (failures == 0 and expected is not None and captures == expected
          and (args.seconds <= 0 or tres["replays"] > 0))
    res = {"ok": ok, "mode": args.mode, "captures": captures, "expected_captures": expected,
           "failures": failures + (0 if ok or failures else 1), "errors": list(STATE["errors"]),
           "max_rel_err": round(errs.max_rel, 6), "tolerance": args.tol, "dtype": args.dtype,
           "hidden": args.hidden, "layers": args.layers, "batch": args.batch, "repeat": args.repeat,
           "graphs_captured_total": counter.captured if counter.available else None,
           "graph_replays_total": counter.replayed if counter.available else None, "info": info}
    if not ok and not res["errors"]:
        res["errors"] = ["%d of %s expected captures verified" % (captures, expected)]
    res.update(tres)
    return res


def start_watchdog(args):
    if args.watchdog_s <= 0:
        return
    faulthandler.dump_traceback_later(max(1.0, args.watchdog_s - 2.0), exit=False, file=sys.stderr)

    def fire():
        if not claim_result():
            return
        with STATE_LOCK:
            res = {"ok": False, "mode": args.mode, "captures": STATE["captures"], "expected_captures": STATE["expected"],
                   "failures": STATE["failures"] + 1,
                   "errors": (list(STATE["errors"]) + ["watchdog: still running after %.0f s, in stage: %s" % (
                       args.watchdog_s, STATE["stage"])])[-MAX_ERRORS:],
                   "replays": STATE["replays"], "replay_rate_per_s": None, "watchdog": True,
                   "stage": STATE["stage"], "tag": args.tag, "pid": os.getpid()}
        sys.stdout = REAL_STDOUT
        write_result(args.out, res)
        os._exit(3)

    t = threading.Timer(args.watchdog_s, fire)
    t.daemon = True
    t.start()


def main(argv=None):
    global REAL_STDOUT
    args = parse_args(argv)
    # Only the JSON line goes to the real stdout: Python and C-level output go to stderr.
    REAL_STDOUT = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    start_watchdog(args)

    def body(a):
        try:
            return measure(a)
        finally:
            if not claim_result():  # the watchdog has answered and is ending the process
                time.sleep(60)
            sys.stdout = REAL_STDOUT

    return run_main("capture_" + args.mode, body, args)


if __name__ == "__main__":
    sys.exit(main())
