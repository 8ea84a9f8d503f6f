// fakecuda-ctl: inspect and manage the shared simulated GPU from the command line.
//   fakecuda-ctl status      print the device state as JSON (see status_report.cpp)
//   fakecuda-ctl reset-peak  set each device's peak-used mark to its current use
//   fakecuda-ctl destroy     remove the shared segment (the next user recreates it)
//   fakecuda-ctl pid-helper  serve host pids to processes in other PID namespaces (host_pid.h)
//                            until SIGTERM/SIGINT; prints one line once it serves
// It honours the same FAKECUDA_* variables as the library: FAKECUDA_SHM_NAME picks the
// segment, and the sizing variables apply if `status`/`reset-peak` has to create it.
#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "config.h"
#include "host_pid.h"
#include "shared_segment.h"
#include "status_report.h"

namespace {

constexpr const char* kLogPrefix = "fakecuda-ctl";

int usage() {
  std::fprintf(stderr, "usage: fakecuda-ctl status | reset-peak | destroy | pid-helper\n");
  return 2;
}

volatile sig_atomic_t g_stop = 0;

// The stand-in for the kernel module's view of pids: it must run in the namespace whose
// pids the device records, and lets whoever may open the segment ask (same mode).
int pid_helper(const std::string& name) {
  fakecuda::SharedSegment segment;
  std::string error;
  if (!segment.open(name, true, kLogPrefix, error)) {
    std::fprintf(stderr, "%s: %s\n", kLogPrefix, error.c_str());
    return 1;
  }
  const uint64_t here = fakecuda::own_pid_namespace();
  if (here == 0 || here != segment.layout()->host_pid_ns) {
    std::fprintf(stderr,
                 "%s: this is PID namespace %llu, the device %s records pids of namespace %llu: "
                 "run the pid helper there\n",
                 kLogPrefix, static_cast<unsigned long long>(here), name.c_str(),
                 static_cast<unsigned long long>(segment.layout()->host_pid_ns));
    return 1;
  }
  struct stat st {};
  const unsigned mode =
      ::stat(("/dev/shm" + name).c_str(), &st) == 0 ? (st.st_mode & 0666u) | 0600u : 0600u;
  struct sigaction action {};
  action.sa_handler = [](int) { g_stop = 1; };
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  const std::string path = fakecuda::pid_helper_socket(name);
  const bool ok = fakecuda::serve_pid_helper(
      path, mode, g_stop,
      [&] {
        std::printf("%s: pid helper serving %s\n", kLogPrefix, path.c_str());
        std::fflush(stdout);
      },
      error);
  if (!ok) std::fprintf(stderr, "%s: %s\n", kLogPrefix, error.c_str());
  return ok ? 0 : 1;
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
  if (std::strcmp(argv[1], "pid-helper") == 0) return pid_helper(name);
  if (std::strcmp(argv[1], "destroy") == 0) {
    if (fakecuda::SharedSegment::destroy(name)) return 0;
    std::fprintf(stderr, "%s: no segment %s\n", kLogPrefix, name.c_str());
    return 1;
  }
  return usage();
}
