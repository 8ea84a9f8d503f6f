// stop_descendants (see descendant_stopper.h).
#include "cli/descendant_stopper.h"

#include <signal.h>

#include <set>

namespace fracgpu::cli {

StopOutcome stop_descendants(DescendantPort& port, std::chrono::milliseconds grace) {
  StopOutcome out;
  std::vector<LiveProcess> live = port.alive();
  if (live.empty()) return out;
  std::set<LiveProcess> termed, killed;
  const auto deadline = port.now() + grace;
  // SIGTERM to each (and to any it forks meanwhile) until they are gone or the grace ends.
  for (;;) {
    for (const LiveProcess& p : live)
      if (termed.count(p) == 0 && port.signal(p, SIGTERM)) termed.insert(p);
    if (port.now() >= deadline || port.hurry()) break;
    port.pause(kStopPoll);
    live = port.alive();
    if (live.empty()) {
      out.terminated = termed.size();
      return out;
    }
  }
  const auto kill_deadline = port.now() + kKillWait;
  for (;;) {
    live = port.alive();
    if (live.empty()) break;
    for (const LiveProcess& p : live)
      if (port.signal(p, SIGKILL)) killed.insert(p);
    if (port.now() >= kill_deadline) {
      for (const LiveProcess& p : live) out.left.push_back(p.pid);
      break;
    }
    port.pause(kStopPoll);
  }
  for (const LiveProcess& p : termed) out.terminated += killed.count(p) == 0;
  out.killed = killed.size();
  return out;
}

}  // namespace fracgpu::cli
