// Process slots, liveness checks through /proc and reclamation of dead processes'
// memory (see process_table.h). Slot transitions are CAS-guarded so that two
// sweepers racing over the same dead process subtract its memory exactly once.
#include "process_table.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace fakecuda {
namespace {

// Reads /proc/<pid>/stat; fills state char and start time. The comm field may contain
// spaces and parentheses, so parsing starts after the last ')'.
bool read_proc_stat(pid_t pid, char& state, uint64_t& start_time) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* file = std::fopen(path, "re");
  if (file == nullptr) return false;
  char buffer[1024];
  size_t length = std::fread(buffer, 1, sizeof buffer - 1, file);
  std::fclose(file);
  buffer[length] = '\0';
  const char* after_comm = std::strrchr(buffer, ')');
  if (after_comm == nullptr) return false;
  // Fields after comm: 3=state ... 22=starttime, i.e. the 20th field after ')'.
  const char* cursor = after_comm + 1;
  for (int field = 3; field <= 22; ++field) {
    while (*cursor == ' ') ++cursor;
    if (*cursor == '\0') return false;
    if (field == 3) state = *cursor;
    if (field == 22) {
      start_time = std::strtoull(cursor, nullptr, 10);
      return true;
    }
    while (*cursor != ' ' && *cursor != '\0') ++cursor;
  }
  return false;
}

}  // namespace

std::optional<uint64_t> process_start_time(pid_t pid) {
  char state = '?';
  uint64_t start = 0;
  if (!read_proc_stat(pid, state, start)) return std::nullopt;
  if (state == 'Z' || state == 'X') return std::nullopt;
  return start;
}

bool process_alive(int32_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  std::optional<uint64_t> start = process_start_time(pid);
  return start && *start == start_time;
}

bool process_stopped(int32_t pid) {
  char state = '?';
  uint64_t start = 0;
  return pid > 0 && read_proc_stat(pid, state, start) && (state == 'T' || state == 't');
}

int ProcessTable::claim_slot(ProcessState from, int32_t pid, uint64_t start_time,
                             const ProcessPlace& place) {
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    ProcessRecord& record = layout_->processes[i];
    uint32_t expected = static_cast<uint32_t>(from);
    if (!record.state.compare_exchange_strong(expected,
                                              static_cast<uint32_t>(ProcessState::Claiming))) {
      continue;
    }
    record.pid = pid;
    record.start_time = start_time;
    record.place = place;
    for (uint32_t d = 0; d < kMaxDevices; ++d) {
      record.used_bytes[d].store(0);
      record.busy_ns[d].store(0);
      record.kernels[d].store(0);
    }
    record.state.store(static_cast<uint32_t>(ProcessState::Live), std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

int ProcessTable::register_self(const ProcessPlace& place) {
  int32_t pid = static_cast<int32_t>(getpid());
  uint64_t start = process_start_time(pid).value_or(0);
  // Prefer never-used slots so exited processes' history stays visible longest.
  int index = claim_slot(ProcessState::Free, pid, start, place);
  if (index < 0) index = claim_slot(ProcessState::Exited, pid, start, place);
  if (index < 0) {
    sweep_dead();  // turns dead Live slots into reusable Exited ones
    index = claim_slot(ProcessState::Exited, pid, start, place);
  }
  return index;
}

void ProcessTable::reclaim(ProcessRecord& record) {
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    uint64_t bytes = record.used_bytes[d].exchange(0);
    if (bytes != 0) layout_->devices[d].used_bytes.fetch_sub(bytes);
  }
  record.state.store(static_cast<uint32_t>(ProcessState::Exited), std::memory_order_release);
}

uint64_t ProcessTable::sweep_dead() {
  uint64_t freed = 0;
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    ProcessRecord& record = layout_->processes[i];
    if (record.state.load(std::memory_order_acquire) != static_cast<uint32_t>(ProcessState::Live))
      continue;
    if (process_alive(record.pid, record.start_time, record.place)) continue;
    uint32_t expected = static_cast<uint32_t>(ProcessState::Live);
    if (!record.state.compare_exchange_strong(expected,
                                              static_cast<uint32_t>(ProcessState::Reclaiming))) {
      continue;  // another sweeper got there first
    }
    for (uint32_t d = 0; d < kMaxDevices; ++d) freed += record.used_bytes[d].load();
    reclaim(record);
  }
  return freed;
}

void ProcessTable::retire(int index) {
  ProcessRecord& record = layout_->processes[index];
  uint32_t expected = static_cast<uint32_t>(ProcessState::Live);
  if (record.state.compare_exchange_strong(expected,
                                           static_cast<uint32_t>(ProcessState::Reclaiming))) {
    reclaim(record);
  }
}

}  // namespace fakecuda
