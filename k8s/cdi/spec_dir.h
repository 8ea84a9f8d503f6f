// fracgpu's CDI spec files in a CDI directory (default /var/run/cdi, which podman,
// containerd >= 1.7 and CRI-O read): one file per device (cdi_spec.h's spec_file_name), so
// a device is written and removed alone and no other writer's file is ever touched.
// Written atomically: a temporary file in the same directory whose name ends in ".tmp"
// (runtimes load only *.json and *.yaml), fsync'ed, made 0644 (runtimes may read as any
// user; nothing in it is secret), renamed over the old one, the directory fsync'ed. A
// runtime that reads the directory at any moment sees the old spec or the new one, never a
// part. Removal: remove() for one device, and stale_devices() — pure, tested with fake
// times — for the files whose device the owner no longer has: a file is stale only when
// its device was absent from a listing taken AFTER the file was last written, so a spec
// written while the listing was under way is kept. Cost: one small file write per
// Allocate; one readdir per reconcile pass.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "cdi/cdi_spec.h"

namespace fracgpu::k8s::cdi {

// A spec file of ours in the directory: its device and when it was last written
// (nanoseconds since the epoch, the file's mtime).
struct SpecFile {
  std::string device;
  int64_t written_ns = 0;
};

// The devices whose files are stale: not in `listed`, a listing begun at `listed_at_ns`,
// and written before it.
std::vector<std::string> stale_devices(const std::vector<SpecFile>& files,
                                       const std::set<std::string>& listed, int64_t listed_at_ns);

class SpecDir {
 public:
  // Opens `dir` for specs of `kind`, creating it (0755, parents too) when missing. Errors,
  // one sentence: a kind that is not valid, a path that is not a directory, a directory
  // this process cannot write.
  static Result<SpecDir> open(const std::string& dir, const std::string& kind);

  const std::string& dir() const { return dir_; }
  const std::string& kind() const { return kind_; }
  std::string path_of(const std::string& device) const;

  // Writes the device's spec (device_spec) atomically; returns its qualified name.
  Result<std::string> write(const std::string& device, const ContainerEdits& edits) const;
  // Removes the device's file; success when it is already gone.
  Status remove(const std::string& device) const;
  // Our files in the directory, other writers' and temporary files left out.
  Result<std::vector<SpecFile>> list() const;
  // Removes the files stale_devices() names; returns the devices removed.
  Result<std::vector<std::string>> reconcile(const std::set<std::string>& listed,
                                             int64_t listed_at_ns) const;

 private:
  SpecDir(std::string dir, std::string kind) : dir_(std::move(dir)), kind_(std::move(kind)) {}
  std::string dir_;
  std::string kind_;
};

// CLOCK_REALTIME in nanoseconds: the clock of file mtimes.
int64_t wall_clock_ns();

}  // namespace fracgpu::k8s::cdi
