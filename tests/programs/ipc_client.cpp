// fracgpu-ipc-client: legacy CUDA IPC between two processes, the way PyTorch's
// multiprocessing shares a CUDA tensor (cuIpcGetMemHandle in the producer, the 64-byte
// handle through a pipe, cuIpcOpenMemHandle in the consumer), for the IPC integration
// tests. Linked against the driver (the shim, when preloaded, stands in front of it).
// Prints one JSON line.
//
//   share --bytes N [--fork] [--keep-ms M]
//       cuMemAlloc N bytes (a swappable tenant's: backed by the shim), fill them with a
//       pattern, get their IPC handle and give it to a child through a pipe: a new program
//       (`open`, exec'd like multiprocessing's spawn) or, with --fork, the forked process
//       itself. The child opens it, checks the pattern, writes its marker over the first
//       4 KiB and closes it. Then this process checks it sees the marker and the rest of
//       the pattern, keeps the memory M ms more without touching it (memory may move to
//       host meanwhile), checks it again and frees it. Reports each step's CUresult, and
//       the driver's CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE of the allocation (0 for
//       memory the shim backs with VMM, 1 for plain cuMemAlloc memory).
//   open --bytes N          the child: handle from stdin (64 bytes), exit 0 when all went
//                           well, else 10 + step (its CUresult on stderr)
//   --hold FILE (share, open): the child, once it has opened the handle, creates
//                           FILE.opened and waits until FILE exists (a test looks at the
//                           books meanwhile)
//
// The idle step's second allocation (--other N: allocated, filled, not shared) shows what
// an idle tenant's swap does to shared and unshared memory side by side.
#include <cuda.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kMarker = 0xc0ffee00u;
constexpr uint64_t kMarkerWords = 1024;  // the child's write: the first 4 KiB

struct Args {
  std::string mode;
  uint64_t bytes = 64ull << 20;
  uint64_t other = 0;
  bool fork_child = false;
  int keep_ms = 0;
  std::string hold;
};

std::string name_of(CUresult rc) {
  const char* name = nullptr;
  if (cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == nullptr)
    return "CUresult " + std::to_string(static_cast<int>(rc));
  return name;
}

uint32_t pattern(uint64_t i, uint32_t seed) {
  return static_cast<uint32_t>(i * 2654435761u) ^ seed;
}

CUresult fill(CUdeviceptr ptr, uint64_t bytes, uint32_t seed) {
  std::vector<uint32_t> host(bytes / 4);
  for (uint64_t i = 0; i < host.size(); ++i) host[i] = pattern(i, seed);
  return cuMemcpyHtoD(ptr, host.data(), bytes);
}

// How many words differ from what the memory should hold (the marker over the first
// `marked` words, the pattern elsewhere); UINT64_MAX when it cannot be read.
uint64_t mismatches(CUdeviceptr ptr, uint64_t bytes, uint32_t seed, uint64_t marked) {
  std::vector<uint32_t> host(bytes / 4);
  if (cuMemcpyDtoH(host.data(), ptr, bytes) != CUDA_SUCCESS) return UINT64_MAX;
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < host.size(); ++i)
    wrong += host[i] != (i < marked ? kMarker + static_cast<uint32_t>(i) : pattern(i, seed));
  return wrong;
}

CUresult init_context() {
  CUresult rc = cuInit(0);
  CUcontext context = nullptr;
  if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxRetain(&context, 0);
  if (rc == CUDA_SUCCESS) rc = cuCtxSetCurrent(context);
  return rc;
}

void sleep_ms(int ms) {
  timespec t{ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
  nanosleep(&t, nullptr);
}

// --hold: says it holds the mapping, then waits (at most 30 s) to be let go.
void hold_open(const std::string& file) {
  if (file.empty()) return;
  if (FILE* f = std::fopen((file + ".opened").c_str(), "w")) std::fclose(f);
  for (int i = 0; i < 6000 && access(file.c_str(), F_OK) != 0; ++i) sleep_ms(5);
}

// The consumer: open, check, mark, close. Returns its exit status.
int consume(int from, uint64_t bytes, const std::string& hold) {
  CUipcMemHandle handle{};
  std::size_t got = 0;
  while (got < sizeof handle) {
    const ssize_t n = read(from, reinterpret_cast<char*>(&handle) + got, sizeof handle - got);
    if (n <= 0) return 10;
    got += static_cast<std::size_t>(n);
  }
  CUresult rc = init_context();
  if (rc != CUDA_SUCCESS) {
    std::fprintf(stderr, "child: init %s\n", name_of(rc).c_str());
    return 11;
  }
  CUdeviceptr ptr = 0;
  rc = cuIpcOpenMemHandle(&ptr, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (rc != CUDA_SUCCESS) {
    std::fprintf(stderr, "child: cuIpcOpenMemHandle %s\n", name_of(rc).c_str());
    return 12;
  }
  if (mismatches(ptr, bytes, 1, 0) != 0) {
    std::fprintf(stderr, "child: the pattern did not come through\n");
    return 13;
  }
  hold_open(hold);
  std::vector<uint32_t> marker(kMarkerWords);
  for (uint64_t i = 0; i < kMarkerWords; ++i) marker[i] = kMarker + static_cast<uint32_t>(i);
  rc = cuMemcpyHtoD(ptr, marker.data(), kMarkerWords * 4);
  if (rc == CUDA_SUCCESS) rc = cuIpcCloseMemHandle(ptr);
  if (rc != CUDA_SUCCESS) {
    std::fprintf(stderr, "child: write/close %s\n", name_of(rc).c_str());
    return 14;
  }
  return 0;
}

// A child reading the handle from a pipe: exec'd (spawn) or the fork itself.
int run_child(const char* self, const Args& args, const CUipcMemHandle& handle) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[1]);
    if (args.fork_child) _exit(consume(pipefd[0], args.bytes, args.hold));
    dup2(pipefd[0], 0);
    const std::string bytes = std::to_string(args.bytes);
    execl("/proc/self/exe", self, "open", "--bytes", bytes.c_str(), "--hold", args.hold.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipefd[0]);
  const bool sent = write(pipefd[1], &handle, sizeof handle) == static_cast<ssize_t>(sizeof handle);
  close(pipefd[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!sent) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int share(const char* self, const Args& args) {
  CUresult rc = init_context();
  CUdeviceptr ptr = 0, other = 0;
  if (rc == CUDA_SUCCESS) rc = cuMemAlloc(&ptr, args.bytes);
  if (rc == CUDA_SUCCESS) rc = fill(ptr, args.bytes, 1);
  if (rc == CUDA_SUCCESS && args.other > 0) rc = cuMemAlloc(&other, args.other);
  if (rc == CUDA_SUCCESS && args.other > 0) rc = fill(other, args.other, 2);
  if (rc != CUDA_SUCCESS) {
    std::printf("{\"stage\":\"allocate\",\"result\":\"%s\"}\n", name_of(rc).c_str());
    return 1;
  }
  int capable = -1;
  cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr);
  CUipcMemHandle handle{};
  rc = cuIpcGetMemHandle(&handle, ptr);
  if (rc != CUDA_SUCCESS) {
    std::printf("{\"stage\":\"cuIpcGetMemHandle\",\"result\":\"%s\",\"legacy_ipc_capable\":%d}\n",
                name_of(rc).c_str(), capable);
    return 2;
  }
  std::fflush(stdout);
  const int child = run_child(self, args, handle);
  const uint64_t wrong = mismatches(ptr, args.bytes, 1, kMarkerWords);
  std::printf("{\"stage\":\"shared\",\"child_exit\":%d,\"mismatches\":%llu}\n", child,
              static_cast<unsigned long long>(wrong));
  std::fflush(stdout);
  uint64_t wrong_later = wrong, other_wrong = 0;
  if (args.keep_ms > 0) {
    sleep_ms(args.keep_ms);  // no device-memory call: the tenant is idle
    wrong_later = mismatches(ptr, args.bytes, 1, kMarkerWords);
    if (args.other > 0) other_wrong = mismatches(other, args.other, 2, 0);
  }
  rc = cuMemFree(ptr);
  if (rc == CUDA_SUCCESS && other != 0) rc = cuMemFree(other);
  std::printf(
      "{\"stage\":\"done\",\"child_exit\":%d,\"mismatches\":%llu,\"mismatches_later\":%llu,"
      "\"other_mismatches\":%llu,\"free\":\"%s\",\"legacy_ipc_capable\":%d}\n",
      child, static_cast<unsigned long long>(wrong), static_cast<unsigned long long>(wrong_later),
      static_cast<unsigned long long>(other_wrong), name_of(rc).c_str(), capable);
  return child == 0 && wrong == 0 && wrong_later == 0 && other_wrong == 0 && rc == CUDA_SUCCESS ? 0
                                                                                                : 3;
}

Args parse(int argc, char** argv) {
  Args a;
  if (argc > 1) a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : "0";
    if (flag == "--bytes") a.bytes = std::strtoull(value, nullptr, 10), ++i;
    if (flag == "--other") a.other = std::strtoull(value, nullptr, 10), ++i;
    if (flag == "--keep-ms") a.keep_ms = std::atoi(value), ++i;
    if (flag == "--hold") a.hold = value, ++i;
    if (flag == "--fork") a.fork_child = true;
  }
  a.bytes &= ~uint64_t{3};
  a.other &= ~uint64_t{3};
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  if (args.mode == "share") return share(argv[0], args);
  if (args.mode == "open") return consume(0, args.bytes, args.hold);
  std::fprintf(stderr,
               "usage: fracgpu-ipc-client share --bytes N [--fork] [--keep-ms M] [--other N] "
               "[--hold F] | open --bytes N [--hold F]\n");
  return 2;
}
