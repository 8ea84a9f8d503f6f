// A FileOps (broker/core/file_ops.h) for the state tests that counts every call and, at
// the armed step, either SIGKILLs its own process before making the call (a crash at
// exactly that point of a save) or fails the call with an errno (a full disk, an I/O
// error). Writes can be cut into small chunks so that a kill also lands between the
// pieces of one file's content (a torn temporary file).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/file_ops.h"

namespace fracgpu::broker::testing {

class StepFileOps final : public FileOps {
 public:
  enum class Action { kKill, kFail };

  // Step `step` (1-based, counted from now) gets `action`; 0 = never.
  void arm(int step, Action action, int error = ENOSPC) {
    count_ = 0;
    stop_at_ = step;
    action_ = action;
    error_ = error;
  }
  void set_write_chunk(std::size_t bytes) { chunk_ = bytes; }
  int steps() const { return count_; }

  int open(const char* path, int flags, mode_t mode) override {
    return pass() ? ::open(path, flags, mode) : -1;
  }
  ssize_t write(int fd, const void* data, size_t size) override {
    return pass() ? ::write(fd, data, chunk_ > 0 ? std::min(size, chunk_) : size) : -1;
  }
  int fsync(int fd) override { return pass() ? ::fsync(fd) : -1; }
  int close(int fd) override {
    const bool go = pass();
    ::close(fd);  // a failed close still releases the descriptor, as POSIX close does
    return go ? 0 : -1;
  }
  int rename(const char* from, const char* to) override { return pass() ? ::rename(from, to) : -1; }
  int unlink(const char* path) override { return ::unlink(path); }  // clean-up, not a step

 private:
  bool pass() {
    if (++count_ != stop_at_) return true;
    if (action_ == Action::kKill) ::kill(::getpid(), SIGKILL);
    errno = error_;
    return false;
  }

  int count_ = 0;
  int stop_at_ = 0;
  Action action_ = Action::kFail;
  int error_ = ENOSPC;
  std::size_t chunk_ = 0;
};

}  // namespace fracgpu::broker::testing
