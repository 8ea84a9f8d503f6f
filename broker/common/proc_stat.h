// /proc/<pid>/stat, read once for everyone who needs a process's state, parent or start
// time: the broker's process watches (core/process_tracker.h), the audit's process port
// (core/process_port.h), the exact-process signal (pidfd_signal.h) and `fracgpu run`'s
// process tree (cli/process_tree.h). Why one reader: field 2 (comm) is the process's own
// name and may hold spaces and ')' — a tenant chooses it — so the fields after it must be
// found from the LAST ')'; four hand copies of that rule were four places to get it wrong.
// Cost: one open and one read of a file well under a page; parsing is a single pass.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fracgpu::broker {

struct ProcStat {
  char state = '?';         // field 3: R, S, D, T, Z (zombie), X (dead), ...
  pid_t ppid = 0;           // field 4
  uint64_t start_time = 0;  // field 22: clock ticks since boot; tells a pid's reuses apart
  bool gone() const { return state == 'Z' || state == 'X'; }  // exited, holds nothing
};

// The fields of a stat file's text; nullopt when it is malformed (a field missing or not
// a number where a number belongs).
std::optional<ProcStat> parse_proc_stat(std::string_view text);

// <proc_root>/<pid>/stat read and parsed; nullopt when there is no such process, it cannot
// be read, or the text is malformed.
std::optional<ProcStat> read_proc_stat(pid_t pid, const std::string& proc_root = "/proc");

}  // namespace fracgpu::broker
