// fakecuda-ctl: inspect and manage the shared simulated GPU from the command line.
//   fakecuda-ctl status      print the device state as JSON (see status_report.cpp)
//   fakecuda-ctl reset-peak  set each device's peak-used mark to its current use
//   fakecuda-ctl destroy     remove the shared segment (the next user recreates it)
// It honours the same FAKECUDA_* variables as the library: FAKECUDA_SHM_NAME picks the
// segment, and the sizing variables apply if `status`/`reset-peak` has to create it.
#include <cstdio>
#include <cstring>
#include <string>

#include "config.h"
#include "shared_segment.h"
#include "status_report.h"

namespace {

constexpr const char* kLogPrefix = "fakecuda-ctl";

int usage() {
  std::fprintf(stderr, "usage: fakecuda-ctl status | reset-peak | destroy\n");
  return 2;
}

int with_segment(const std::string& name,
                 void (*action)(fakecuda::SegmentLayout*, const std::string&)) {
  fakecuda::SharedSegment segment;
  std::string error;
  if (!segment.open(name, true, kLogPrefix, error)) {
    std::fprintf(stderr, "%s: %s\n", kLogPrefix, error.c_str());
    return 1;
  }
  action(segment.layout(), name);
  return 0;
}

void print_status(fakecuda::SegmentLayout* layout, const std::string& name) {
  std::fputs(fakecuda::status_json(layout, name).c_str(), stdout);
}

void reset_peak(fakecuda::SegmentLayout* layout, const std::string&) {
  fakecuda::reset_peaks(layout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return usage();
  std::string name = fakecuda::shared_segment_name(kLogPrefix);
  if (std::strcmp(argv[1], "status") == 0) return with_segment(name, print_status);
  if (std::strcmp(argv[1], "reset-peak") == 0) return with_segment(name, reset_peak);
  if (std::strcmp(argv[1], "destroy") == 0) {
    if (fakecuda::SharedSegment::destroy(name)) return 0;
    std::fprintf(stderr, "%s: no segment %s\n", kLogPrefix, name.c_str());
    return 1;
  }
  return usage();
}
