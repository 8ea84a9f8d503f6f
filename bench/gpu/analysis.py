"""Window arithmetic of the benchmark: throughput of a tenant between two wall-clock times
from its samples [t, units] (linear between samples), the window every tenant of a group was
measuring, shares normalised by each kind's rate alone, per-window shares (1 s, 100 ms) and
their spread, and gaps in progress (the fault phases)."""
from gpubench import spread


def units_at(r, t):
    """Units tenant result r had completed at absolute time t."""
    s, t0 = r.get("samples") or [], r.get("t_start", 0)
    if not s:
        return 0.0
    rel = t - t0
    if rel <= s[0][0]:
        return float(s[0][1])
    for (a, ca), (b, cb) in zip(s, s[1:]):
        if rel <= b:
            return ca + (cb - ca) * ((rel - a) / (b - a) if b > a else 1.0)
    return float(s[-1][1])


def rate(r, a, b):
    if not r or not r.get("ok") or b <= a:
        return None
    return (units_at(r, b) - units_at(r, a)) / (b - a)


def common_window(results):
    if not results or any(not r or not r.get("ok") or "t_start" not in r for r in results):
        return None
    a = max(r["t_start"] for r in results)
    b = min(r["t_end"] for r in results)
    return (a, b) if b > a else None


def shares(results, alone, a, b):
    """(normalised rates, shares, efficiency) over [a, b]; alone: rate alone per result."""
    norm = []
    for r, al in zip(results, alone):
        v = rate(r, a, b)
        norm.append(v / al if v is not None and al else None)
    if any(x is None for x in norm):
        return norm, [None] * len(norm), None
    total = sum(norm)
    return norm, [x / total if total else None for x in norm], total


def windowed(results, alone, a, b, width):
    """Per-window shares: a list (one per tenant) of the shares in consecutive windows."""
    per = [[] for _ in results]
    t = a
    while t + width <= b + 1e-9:
        _, sh, _ = shares(results, alone, t, t + width)
        for i, x in enumerate(sh):
            if x is not None:
                per[i].append(x)
        t += width
    return per


def share_over_time(results, alone, a, b, width):
    """[(t since a, [share of each tenant])] for the plots."""
    out, t = [], a
    while t + width <= b + 1e-9:
        _, sh, _ = shares(results, alone, t, t + width)
        out.append((round(t - a + width / 2, 4), sh))
        t += width
    return out


def window_stats(per_window, target):
    """Spread of the per-window shares and of their error against the target."""
    st = spread(per_window)
    errs = [abs(x - target) for x in per_window] if target is not None else []
    st["max_abs_error"] = max(errs) if errs else None
    st["mean_abs_error"] = sum(errs) / len(errs) if errs else None
    return st


def first_progress_after(r, t):
    """Seconds from absolute time t until r completed a unit after t (None if never)."""
    s, t0 = r.get("samples") or [], r.get("t_start", 0)
    base = units_at(r, t)
    for ts, c in s:
        if t0 + ts > t and c > base + 1e-9:
            return t0 + ts - t
    return None


def longest_gap(r, a, b):
    """The longest time in [a, b] between two samples where units did not grow."""
    s, t0 = r.get("samples") or [], r.get("t_start", 0)
    pts = [(t0 + ts, c) for ts, c in s if a <= t0 + ts <= b]
    best, last_t, last_c = 0.0, None, None
    for t, c in pts:
        if last_t is None or c > last_c:
            if last_t is not None:
                best = max(best, t - last_t)
            last_t, last_c = t, c
    return best
