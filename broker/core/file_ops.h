// The file-system calls the state store makes (open, write, fsync, close, rename), behind
// one small port so that tests can stop a save after any step (a crash at every point,
// deterministically, in a child that is SIGKILLed there) or make any step fail (a full
// disk, an I/O error). The broker uses PosixFileOps; nothing here is on a hot path
// (tenants.json is written only by admin commands).
#pragma once

#include <sys/types.h>

namespace fracgpu::broker {

class FileOps {
 public:
  virtual ~FileOps() = default;
  // Same contracts as the POSIX calls: -1 and errno on failure.
  virtual int open(const char* path, int flags, mode_t mode) = 0;
  virtual ssize_t write(int fd, const void* data, size_t size) = 0;
  virtual int fsync(int fd) = 0;
  virtual int close(int fd) = 0;
  virtual int rename(const char* from, const char* to) = 0;
  virtual int unlink(const char* path) = 0;
};

class PosixFileOps final : public FileOps {
 public:
  int open(const char* path, int flags, mode_t mode) override;
  ssize_t write(int fd, const void* data, size_t size) override;
  int fsync(int fd) override;
  int close(int fd) override;
  int rename(const char* from, const char* to) override;
  int unlink(const char* path) override;
};

// The process-wide POSIX implementation (stateless).
FileOps& posix_file_ops();

}  // namespace fracgpu::broker
