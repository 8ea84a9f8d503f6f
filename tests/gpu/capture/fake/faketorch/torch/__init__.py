"""A tiny numpy stand-in for the parts of torch that capture_client.py's graph, graph_thread_local
and serving modes use, to check the client's logic without a GPU (not its compile mode):

  PYTHONPATH=tests/gpu/capture/fake/faketorch /usr/bin/python3 tests/gpu/capture/capture_client.py \
      --mode serving --repeat 4 --seconds 1 --hidden 64 --batch 8          (needs numpy)

CUDA graphs: the ops of nn modules run during a capture are recorded and their outputs filled with
NaN (kernels do not run during a capture); replay re-runs the recorded ops into the same buffers.
FAKE_TORCH_FAIL_CAPTURE=2,5 makes those captures fail; FAKE_TORCH_STALE_REPLAY=1 makes replays do
nothing (the client must then fail every check); FAKE_TORCH_HANG=1 makes replays hang (watchdog).
Never on the path of a real run: only an explicit PYTHONPATH brings it in."""
import contextlib, os, time
import numpy as np
__version__ = "0.0-fake"
class _V: cuda = "13.0-fake"
version = _V()
bfloat16, float16, float32 = "bf16", "fp16", "fp32"
_CAPTURE = []   # the graph being captured (list of thunks), or empty
_NCAPT = [0]
def _rnd(v, dtype):
    if dtype == "bf16":  # round to 8 mantissa bits
        m, e = np.frexp(v.astype(np.float64))
        return np.ldexp(np.round(m * 256) / 256, e).astype(np.float32)
    return v.astype(np.float32)
class Tensor:
    def __init__(self, a, dtype="fp32"):
        self.a = a if isinstance(a, np.ndarray) else np.asarray(a, dtype=np.float32)
        self.dtype = dtype
    def float(self): return Tensor(self.a.astype(np.float32), "fp32")
    def abs(self): return Tensor(np.abs(self.a), self.dtype)
    def max(self): return Tensor(np.asarray(np.max(self.a)), self.dtype)
    amax = max
    def all(self): return Tensor(np.asarray(bool(np.all(self.a))))
    def clamp_min(self, v): return Tensor(np.maximum(self.a, v), self.dtype)
    def __float__(self): return float(self.a)
    def __bool__(self): return bool(self.a)
    def __sub__(self, o): return Tensor(self.a - (o.a if isinstance(o, Tensor) else o), self.dtype)
    def __truediv__(self, o): return Tensor(self.a / (o.a if isinstance(o, Tensor) else o), self.dtype)
    def __getitem__(self, k): return Tensor(self.a[k], self.dtype)   # a view, like torch
    def copy_(self, o): self.a[...] = o.a; return self
    def clone(self): return Tensor(self.a.copy(), self.dtype)
    def requires_grad_(self, f): return self
    @property
    def shape(self): return self.a.shape
def device(kind, idx=0): return (kind, idx)
_rng = np.random.default_rng(0)
def manual_seed(s):
    global _rng
    _rng = np.random.default_rng(s)
def randn(*shape, device=None, dtype="fp32"): return Tensor(_rnd(_rng.standard_normal(shape), dtype), dtype)
def zeros(*shape, device=None, dtype="fp32"):
    if len(shape) == 1 and isinstance(shape[0], tuple): shape = shape[0]
    return Tensor(np.zeros(shape, dtype=np.float32), dtype)
def isfinite(t): return Tensor(np.isfinite(t.a))
def maximum(a, b, out=None):
    r = np.maximum(a.a, b.a)
    if out is not None: out.a[...] = r; return out
    return Tensor(r)
def nan_to_num(t, nan=0.0): return Tensor(np.nan_to_num(t.a, nan=nan), t.dtype)
no_grad = contextlib.nullcontext
class _NN:
    class Module:
        def __call__(self, x): return self.forward(x)
        def eval(self): return self
    class Linear(Module):
        def __init__(self, i, o, bias=True):
            k = 1 / np.sqrt(i)
            self.w = Tensor(_rng.uniform(-k, k, (o, i)).astype(np.float32)); self.b = Tensor(_rng.uniform(-k, k, (o,)).astype(np.float32))
        def to(self, device=None, dtype="fp32"):
            self.w = Tensor(_rnd(self.w.a, dtype), dtype); self.b = Tensor(_rnd(self.b.a, dtype), dtype); self.dtype = dtype; return self
        def parameters(self): return [self.w, self.b]
        def forward(self, x):
            f = lambda: _rnd(x.a @ self.w.a.T + self.b.a, self.dtype)
            return _op(f, x.dtype)
    class GELU(Module):
        def to(self, **k): return self
        def parameters(self): return []
        def forward(self, x):
            f = lambda: _rnd(0.5 * x.a * (1 + np.tanh(0.7978845608 * (x.a + 0.044715 * x.a ** 3))), x.dtype)
            return _op(f, x.dtype)
    class Sequential(Module):
        def __init__(self, *m): self.m = m
        def to(self, device=None, dtype="fp32"):
            for x in self.m: x.to(device=device, dtype=dtype)
            return self
        def parameters(self): return [p for x in self.m for p in x.parameters()]
        def forward(self, x):
            for m in self.m: x = m(x)
            return x
nn = _NN()
def _op(f, dtype):
    if _CAPTURE:
        first = f()
        out = Tensor(np.full_like(first, np.nan), dtype)
        _CAPTURE[-1].append(lambda: out.a.__setitem__(Ellipsis, f()))
        return out
    return Tensor(f(), dtype)
class _Cuda:
    def is_available(self): return True
    def set_device(self, d): pass
    def get_device_name(self, d): return "Fake GPU"
    def synchronize(self): pass
    class Stream:
        def wait_stream(self, s): pass
        def synchronize(self): pass
    def current_stream(self): return _Cuda.Stream()
    def stream(self, s): return contextlib.nullcontext()
    def graph_pool_handle(self): return ("pool", time.time())
    class Event:
        def __init__(self, enable_timing=False): self.t = None
        def record(self): self.t = time.perf_counter()
        def synchronize(self): pass
        def elapsed_time(self, o): return (o.t - self.t) * 1000
    class CUDAGraph:
        def __init__(self): self.thunks = None
        def capture_begin(self, pool=None, capture_error_mode="global"):
            _CAPTURE.append([])
        def capture_end(self):
            self.thunks = _CAPTURE.pop()
            _NCAPT[0] += 1
            if str(_NCAPT[0]) in os.environ.get("FAKE_TORCH_FAIL_CAPTURE", "").split(","):
                raise RuntimeError("CUDA error: operation not permitted when stream is capturing (fake)")
        def replay(self):
            if os.environ.get("FAKE_TORCH_STALE_REPLAY"): return
            if os.environ.get("FAKE_TORCH_HANG"): time.sleep(100)
            for t in self.thunks: t()
    class graph:
        def __init__(self, g, pool=None, stream=None, capture_error_mode="global"):
            assert capture_error_mode in ("global", "thread_local", "relaxed")
            self.g = g; self.mode = capture_error_mode
        def __enter__(self): self.g.capture_begin(capture_error_mode=self.mode)
        def __exit__(self, *a): self.g.capture_end()
cuda = _Cuda()
