// fakecuda-mps-control: the simulated GPU's MPS control daemon, standing in for
// nvidia-cuda-mps-control with the subset of its interface fracgpu uses:
//   fakecuda-mps-control -d   start the daemon in the background; exits 0 once it serves,
//                             1 (with the real daemon's message) when it cannot
//   fakecuda-mps-control -f   run the daemon in the foreground
//   fakecuda-mps-control      read commands from stdin, send them to the running daemon and
//                             print its answers: quit, get_server_list, get_client_list PID
// Like the real daemon it serves CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps), which
// must exist ("Cannot access CUDA_MPS_PIPE_DIRECTORY=..."), writes its pid to
// nvidia-cuda-mps-control.pid there, holds control_lock (a second daemon on the same
// directory exits 1: "An instance of this daemon is already running"), listens on the Unix
// socket "control" there and logs to control.log in CUDA_MPS_LOG_DIRECTORY (default
// /var/log/nvidia-mps; a warning when it cannot). `quit` refuses new clients and exits once
// the present ones have; SIGTERM exits at once. Unlike the real one, the MPS server runs
// inside the daemon (mps_server.h): killing the daemon kills the server, and its clients'
// work then fails with CUDA_ERROR_MPS_CONNECTION_FAILED. It maps the simulated device that
// FAKECUDA_SHM_NAME names, like every process of the fake driver.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "config.h"
#include "mps_server.h"
#include "shared_segment.h"

namespace {

constexpr const char* kLogPrefix = "fakecuda-mps-control";
volatile std::sig_atomic_t g_terminate = 0;

void on_terminate(int) {
  g_terminate = 1;
}

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

std::string pipe_directory() {
  return env_or("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps");
}

bool socket_address(const std::string& path, sockaddr_un* address) {
  if (path.size() >= sizeof address->sun_path) return false;
  *address = sockaddr_un{};
  address->sun_family = AF_UNIX;
  std::memcpy(address->sun_path, path.c_str(), path.size() + 1);
  return true;
}

class Daemon {
 public:
  // Serves until quit (and the clients are gone) or SIGTERM. `ready_fd` gets one byte
  // (1 = serving, 0 = failed) and is closed.
  int run(bool background, int ready_fd);

 private:
  bool set_up(std::string* error);
  void serve_connection(int fd);
  std::string answer(const std::string& command);
  void log(const std::string& message);
  void clean_up();

  std::string pipe_ = pipe_directory();
  std::string log_dir_ = env_or("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps");
  FILE* log_ = nullptr;
  int lock_fd_ = -1;
  int listen_fd_ = -1;
  bool quitting_ = false;
  fakecuda::SharedSegment segment_;
  fakecuda::MpsServer server_;
};

void Daemon::log(const std::string& message) {
  if (log_ == nullptr) return;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  tm local{};
  localtime_r(&now.tv_sec, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &local);
  std::fprintf(log_, "[%s.%03ld Control %d] %s\n", stamp, now.tv_nsec / 1'000'000,
               static_cast<int>(::getpid()), message.c_str());
  std::fflush(log_);
}

bool Daemon::set_up(std::string* error) {
  log_ = std::fopen((log_dir_ + "/control.log").c_str(), "ae");
  if (log_ == nullptr)
    std::fprintf(
        stderr, "Warning: Failed writing log files to directory [%s]. No logs will be available.\n",
        log_dir_.c_str());
  lock_fd_ = ::open((pipe_ + "/control_lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    *error = "An instance of this daemon is already running";
    return false;
  }
  std::string why;
  if (!segment_.open(fakecuda::shared_segment_name(kLogPrefix), true, kLogPrefix, why) ||
      !server_.start(segment_.layout(), pipe_, why)) {
    *error = "cannot start the simulated MPS server: " + why;
    return false;
  }
  sockaddr_un address{};
  const std::string control = pipe_ + "/control";
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ::unlink(control.c_str());
  if (listen_fd_ < 0 || !socket_address(control, &address) ||
      ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::chmod(control.c_str(), 0666) != 0 || ::listen(listen_fd_, 16) != 0) {
    *error = "cannot listen on " + control + ": " + std::strerror(errno);
    return false;
  }
  const std::string pid_file = pipe_ + "/" + fakecuda::kMpsPidFileName;
  const std::string temporary = pid_file + ".tmp";
  FILE* file = std::fopen(temporary.c_str(), "we");
  if (file == nullptr || std::fprintf(file, "%d", static_cast<int>(::getpid())) < 0 ||
      std::fclose(file) != 0 || ::rename(temporary.c_str(), pid_file.c_str()) != 0) {
    *error = "cannot write " + pid_file + ": " + std::strerror(errno);
    return false;
  }
  ::chmod(pid_file.c_str(), 0644);
  log("Starting control daemon using socket " + control);
  log("To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY=" + pipe_);
  return true;
}

std::string Daemon::answer(const std::string& command) {
  log("Cmd:" + command);
  if (command == "quit") {
    server_.stop_accepting();
    quitting_ = true;
    return "";
  }
  if (command == "get_server_list")
    return server_.live_clients() > 0 ? std::to_string(::getpid()) + "\n" : "";
  if (command.rfind("get_client_list", 0) == 0) {
    if (std::atol(command.c_str() + std::strlen("get_client_list")) != ::getpid()) return "";
    std::string out;
    for (pid_t pid : server_.clients()) out += std::to_string(pid) + "\n";
    return out;
  }
  return "Unrecognized command: " + command + "\n";
}

void Daemon::serve_connection(int fd) {
  timeval timeout{1, 0};  // a control client that stops talking is dropped
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string pending;
  char buffer[512];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    pending.append(buffer, static_cast<size_t>(n));
    for (size_t end; (end = pending.find('\n')) != std::string::npos;) {
      std::string command = pending.substr(0, end);
      pending.erase(0, end + 1);
      while (!command.empty() && (command.back() == '\r' || command.back() == ' '))
        command.pop_back();
      if (command.empty()) continue;
      const std::string reply = answer(command);
      if (!reply.empty()) (void)::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    }
    if (pending.size() > 4096) break;
  }
  if (!pending.empty()) {
    const std::string reply = answer(pending);
    if (!reply.empty()) (void)::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
  }
  ::close(fd);
}

void Daemon::clean_up() {
  server_.stop();
  ::unlink((pipe_ + "/" + fakecuda::kMpsPidFileName).c_str());
  if (listen_fd_ >= 0) ::close(listen_fd_);
  log("Exit with status 0");
  if (log_ != nullptr) std::fclose(log_);
}

int Daemon::run(bool background, int ready_fd) {
  std::string error;
  const bool ok = set_up(&error);
  if (!ok) std::fprintf(stderr, "%s\n", error.c_str());
  if (ready_fd >= 0) {
    const char byte = ok ? 1 : 0;
    (void)::write(ready_fd, &byte, 1);
    ::close(ready_fd);
  }
  if (!ok) return 1;
  if (background) {
    const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd <= 2 && null >= 0; ++fd) ::dup2(null, fd);
  }
  struct sigaction action {};
  action.sa_handler = on_terminate;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  while (g_terminate == 0) {
    if (quitting_ && server_.live_clients() == 0) break;
    pollfd entry{listen_fd_, POLLIN, 0};
    if (::poll(&entry, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) serve_connection(fd);
  }
  clean_up();
  return 0;
}

int start_daemon(bool background) {
  struct stat st {};
  const std::string pipe = pipe_directory();
  if (::stat(pipe.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::access(pipe.c_str(), W_OK) != 0) {
    std::fprintf(stderr, "Cannot access CUDA_MPS_PIPE_DIRECTORY=%s\n", pipe.c_str());
    return 1;
  }
  if (!background) return Daemon().run(false, -1);
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return 1;
  const pid_t child = ::fork();
  if (child < 0) return 1;
  if (child > 0) {  // the parent returns once the daemon serves (or failed)
    ::close(ready[1]);
    char byte = 0;
    const bool served = ::read(ready[0], &byte, 1) == 1 && byte == 1;
    return served ? 0 : 1;
  }
  ::close(ready[0]);
  ::setsid();
  std::_Exit(Daemon().run(true, ready[1]));
}

int send_commands() {
  sockaddr_un address{};
  const std::string control = pipe_directory() + "/control";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || !socket_address(control, &address) ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    std::fprintf(stderr, "Cannot find MPS control daemon process\n");
    return 1;
  }
  std::string input;
  char buffer[512];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, stdin)) > 0;) input.append(buffer, n);
  if (!input.empty() && input.back() != '\n') input += '\n';
  if (::send(fd, input.data(), input.size(), MSG_NOSIGNAL) < 0) return 1;
  ::shutdown(fd, SHUT_WR);
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;)
    std::fwrite(buffer, 1, static_cast<size_t>(n), stdout);
  ::close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 1) return send_commands();
  if (argc == 2 && std::strcmp(argv[1], "-d") == 0) return start_daemon(true);
  if (argc == 2 && std::strcmp(argv[1], "-f") == 0) return start_daemon(false);
  std::fprintf(stderr, "usage: fakecuda-mps-control [-d | -f]   (no option: commands on stdin)\n");
  return 2;
}
