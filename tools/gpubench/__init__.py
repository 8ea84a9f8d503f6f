"""gpubench: what fracgpu's real-GPU scripts share (tests/gpu/* pass/fail checks and the
bench/gpu benchmark suite): processes under time limits in their own sessions
(procs), a node broker and its tenants (broker), the NVIDIA MPS control daemon (mps),
statistics and result records (records), and the machine the run is on, real GPU or
simulated (platform). Standard library only; nothing here changes the GPU's settings."""
from .procs import Proc, child_env, killgroup, last_json, run, tail  # noqa: F401
from .broker import NodeBroker  # noqa: F401
from .mps import Mps  # noqa: F401
from .records import Records, median, percentile, spread  # noqa: F401
from .platform import Platform  # noqa: F401

__all__ = ["Proc", "child_env", "killgroup", "last_json", "run", "tail", "NodeBroker", "Mps", "Records", "median",
           "percentile", "spread", "Platform"]
