// Monotonic time and precise waiting for simulated device work. A kernel that should
// occupy the device for 1 ms must take 1 ms give or take ~20 us, which a plain sleep
// cannot deliver (timer slack alone is 50 us). We sleep until shortly before the
// deadline and spin for the rest.
#pragma once

#include <cstdint>

namespace fakecuda {

int64_t monotonic_ns();

// Sleeps until `deadline_ns` (CLOCK_MONOTONIC), spinning for the final stretch.
void sleep_until_precise(int64_t deadline_ns);

// Asks the kernel for tight timer slack on the calling thread (our executor threads
// only; never applied to application threads).
void use_tight_timer_slack();

}  // namespace fakecuda
