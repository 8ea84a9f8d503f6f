"""The benchmark's time budget (--budget, default 480 s, --quick 210 s), made explicit: each
phase has a planned share of it, a phase that runs long shortens the windows (and request
counts) of the phases after it instead of dropping their rows, and results.json records, per
phase, the planned, allotted and actual seconds and how far its windows were shortened.

The planned seconds are those of the reference run (an H200, every way of sharing: native,
MPS, fracgpu, fracgpu-mps, HAMi-core), scaled by --budget over the reference budget. A phase
may take up to 1.5 times its plan when earlier phases left time over; its windows never grow
past their nominal length. Inside a phase a RoundPlan spreads what is left over the rounds
still to run: window = what is left (less the start-ups still to come and each round's
overhead, learned as the rounds go) over the rounds left, between a floor and the nominal
length. Only when even the floors do not fit does a phase skip rows ("time budget")."""
import time

# Reference plan, seconds (see bench/gpu/README.md, "Time budget", for the reasoning).
REFERENCE = {
    False: (480, {"latency": 170, "faults": 13, "shares": 170, "conserve": 12, "ceilings": 11, "memory": 10,
                  "overhead": 36}),
    True: (210, {"latency": 75, "faults": 10, "shares": 62, "conserve": 8, "ceilings": 6, "memory": 9,
                 "overhead": 16}),
}
REPORT_RESERVE_S = 12  # results.json, CSV, plots and the archive, after the phases
BORROW = 1.5


class Budget:
    def __init__(self, total, quick, t0, phases):
        ref_total, ref = REFERENCE[bool(quick)]
        self.total, self.t0, self.quick = float(total), t0, quick
        self.deadline = t0 + self.total
        self.planned = {p: ref[p] * self.total / ref_total for p in phases}
        self.records = {p: {"planned_s": round(self.planned[p], 1), "allotted_s": None, "actual_s": None,
                            "status": "not run", "scale_min": None, "rounds": 0, "rounds_shortened": 0}
                        for p in phases}
        self.pending = list(phases)
        self.current = None

    def phases_left_s(self):
        """Seconds the phases still have: to the deadline, less the report's reserve."""
        return self.deadline - REPORT_RESERVE_S - time.time()

    def begin(self, name):
        if name in self.pending:
            self.pending.remove(name)
        rest = self.planned[name] + sum(self.planned[p] for p in self.pending)
        ratio = self.phases_left_s() / rest if rest > 0 else 1.0
        allotted = max(0.0, self.planned[name] * min(BORROW, ratio))
        self.records[name]["allotted_s"] = round(allotted, 1)
        self.current = PhaseBudget(self, name, self.planned[name], allotted)
        return self.current

    def end(self, name, status, seconds):
        r = self.records[name]
        r.update(status=status, actual_s=round(seconds, 1))
        self.current = None

    def to_json(self):
        return {"total_s": self.total, "reference": "H200 full run" if not self.quick else "H200 --quick run",
                "report_reserve_s": REPORT_RESERVE_S, "borrow_max": BORROW,
                "phases": self.records,
                "planned_sum_s": round(sum(r["planned_s"] for r in self.records.values()), 1),
                "actual_sum_s": round(sum(r["actual_s"] or 0 for r in self.records.values()), 1)}


class PhaseBudget:
    def __init__(self, budget, name, planned, allotted):
        self.budget, self.name, self.planned, self.allotted = budget, name, planned, allotted
        self.t0 = time.time()
        self.deadline = min(self.t0 + allotted, budget.deadline - REPORT_RESERVE_S)

    def left(self):
        return self.deadline - time.time()

    def scale(self):
        """The phase's share against its plan, at most 1: what request counts are scaled by
        when a phase sizes its work once (RoundPlan adapts round by round)."""
        return min(1.0, self.allotted / self.planned) if self.planned else 1.0

    def rounds(self, n, cost, minimum, overhead=0.4, learn="overhead", fixed=0.0):
        """A RoundPlan for n rounds of `cost` seconds at scale 1 (a window's length, or a
        latency round's duration), none shorter than `minimum` (a scale, 0-1)."""
        return RoundPlan(self, n, cost, minimum, overhead, learn, fixed)

    def note(self, scale):
        r = self.budget.records[self.name]
        r["rounds"] += 1
        if scale < 0.999:
            r["rounds_shortened"] += 1
        r["scale_min"] = round(scale, 3) if r["scale_min"] is None else round(min(r["scale_min"], scale), 3)


class RoundPlan:
    """Scales of the rounds still to run, so that they end by the phase's deadline. learn:
    "overhead" (the round's cost is its window, exact; what lies around it is learned) or
    "cost" (a latency round: its length at scale 1 is learned, the overhead kept)."""

    def __init__(self, phase, n, cost, minimum, overhead, learn, fixed):
        self.phase, self.left_n, self.cost, self.minimum = phase, n, float(cost), minimum
        self.overhead, self.learn, self.fixed = overhead, learn, fixed
        self._scale, self._t = 1.0, None

    def scale(self):
        n = max(1, self.left_n)
        avail = self.phase.left() - self.fixed
        s = (avail / n - self.overhead) / self.cost if self.cost > 0 else 1.0
        self._scale = max(self.minimum, min(1.0, s))
        self._t = time.time()
        return self._scale

    def window(self):
        return self.scale() * self.cost

    def done(self):
        """After a round: learn from its length, count it."""
        if self._t is None:
            return
        took = time.time() - self._t
        if self.learn == "overhead":
            seen = max(0.0, took - self._scale * self.cost)
            self.overhead = 0.5 * self.overhead + 0.5 * seen
        elif self._scale > 0:
            seen = max(0.05, (took - self.overhead) / self._scale)
            self.cost = 0.5 * self.cost + 0.5 * seen
        self.left_n -= 1
        self.phase.note(self._scale)
        self._t = None

    def started(self, fixed_seconds):
        """A start-up counted in `fixed` is over."""
        self.fixed = max(0.0, self.fixed - fixed_seconds)
