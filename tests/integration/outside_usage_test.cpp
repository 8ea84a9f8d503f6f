// Memory outside every tenant is part of the books (issue 27, row 10), end to end: the real
// broker reading the simulated NVML (fakecuda/nvml, which lists every process holding
// memory on the simulated GPU, shim or not), the real CLI, and a host job that runs without
// the shim (fracgpu-alloc-client over the simulated driver, no LD_PRELOAD) holding 2 GiB of
// the 4 GiB GPU:
//  - `fracgpu status` (table and --json) and the metric fracgpu_gpu_memory_outside_bytes
//    show it, with its pid, within a few audit passes;
//  - a guarantee that would need it is refused, naming it; one that fits is admitted;
//  - what is lent shrinks by it: a best-effort tenant cannot borrow what a guaranteed
//    tenant was promised, so the guaranteed tenant still gets its whole request;
//  - with --fracgpu-only it is an `outside` violation (once, in the log, the GPU's status
//    and fracgpu_gpu_outside_violations_total); without it, it is counted but not reported.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <sstream>
#include <thread>

#include "broker_fixture.h"

namespace fracgpu::testing {
namespace {

using nlohmann::json;

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return ok ? ntohs(addr.sin_port) : 0;
}

std::string http_get(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string text;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[65536];
      for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, n);
    }
  }
  close(fd);
  return text;
}

// The value of the first sample of `name` (a GPU series: one GPU here), -1 if none.
double sample_value(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t close = line.find("} ");
    if (line.rfind(name + "{", 0) == 0 && close != std::string::npos)
      return std::stod(line.substr(close + 2));
  }
  return -1;
}

// The host job: 2 GiB plus its 64 MiB context, in no tenant.
constexpr uint64_t kOutside = 2 * kGiB + 64 * kMiB;

class OutsideUsage : public BrokerFixture {
 protected:
  void SetUp() override {
    port_ = free_port();
    ASSERT_NE(port_, 0);
    extra_broker_args_ = {"--nvml",           FRACGPU_FAKENVML_DIR "/libnvidia-ml.so.1",
                          "--audit-interval", "100",
                          "--metrics-listen", "127.0.0.1:" + std::to_string(port_)};
    if (fracgpu_only_) extra_broker_args_.push_back("--fracgpu-only");
    BrokerFixture::SetUp();
  }
  void TearDown() override {
    if (host_job_) host_job_->kill_and_reap();
    BrokerFixture::TearDown();
  }

  json gpu_status() {
    ProcessResult r = cli({"status", "--json"});
    json doc = json::parse(r.out, nullptr, false);
    if (!doc.is_object() || !doc["gpus"].is_array() || doc["gpus"].empty()) return json();
    return doc["gpus"][0];
  }
  uint64_t outside_bytes() {
    return gpu_status().value("outside", json::object()).value("bytes", uint64_t{0});
  }

  // The host job, started without the shim; waits until the broker counts its memory.
  void start_host_job() {
    host_job_ = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(2 * kGiB)},
        native_env(), dir_.path() + "/host-job");
    ASSERT_EQ(host_job_->wait_until_ready(
                  [&] { return host_job_->out().find("\"holding\"") != std::string::npos; },
                  std::chrono::seconds(15)),
              "");
    const auto took =
        wait_until([&] { return outside_bytes() == kOutside; }, std::chrono::seconds(5));
    ASSERT_EQ(outside_bytes(), kOutside) << gpu_status().dump();
    std::printf("outside memory in the books %lld ms after the host job held it\n",
                static_cast<long long>(took.count()));
  }

  bool fracgpu_only_ = false;  // --fracgpu-only (OutsideUsageFracgpuOnly)
  int port_ = 0;
  std::unique_ptr<BackgroundProcess> host_job_;
};

TEST_F(OutsideUsage, StatusAndMetricsShowTheMemoryOfAProcessInNoTenant) {
  start_host_job();
  const json outside = gpu_status()["outside"];
  EXPECT_EQ(outside.value("known", false), true);
  EXPECT_EQ(outside.value("process_bytes", uint64_t{0}), kOutside);
  EXPECT_EQ(outside.value("driver_bytes", uint64_t{1}), 0u) << "the simulated NVML's used is "
                                                               "what its processes hold";
  ASSERT_EQ(outside["processes"].size(), 1u) << outside.dump();
  EXPECT_EQ(outside["processes"][0].value("pid", 0), host_job_->pid());
  EXPECT_EQ(outside["processes"][0].value("bytes", uint64_t{0}), kOutside);
  // The table.
  ProcessResult table = cli({"status"});
  EXPECT_NE(table.out.find("OUTSIDE"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("outside: pid " + std::to_string(host_job_->pid()) +
                           " holds 2.1 GiB of GPU 0 in no tenant"),
            std::string::npos)
      << table.out;
  // The metric.
  EXPECT_EQ(sample_value(http_get(port_, "/metrics"), "fracgpu_gpu_memory_outside_bytes"),
            static_cast<double>(kOutside));
  // Gone with the process.
  host_job_->kill_and_reap();
  wait_until([&] { return outside_bytes() == 0; }, std::chrono::seconds(5));
  EXPECT_EQ(outside_bytes(), 0u);
  EXPECT_EQ(sample_value(http_get(port_, "/metrics"), "fracgpu_gpu_memory_outside_bytes"), 0.0);
}

TEST_F(OutsideUsage, AGuaranteeThatWouldNeedItIsRefusedNamingIt) {
  start_host_job();
  ProcessResult r = cli({"tenant", "create", "big", "--memory", "3GiB", "--gpu", "0"});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("memory request 3 GiB does not fit on GPU 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2.1 GiB held outside every tenant (pid " +
                       std::to_string(host_job_->pid()) + " 2.1 GiB)"),
            std::string::npos)
      << r.err;
  // What fits beside it is admitted; a raise past it is refused like a creation.
  create_tenant("small", "1GiB");
  r = cli({"tenant", "update", "small", "--memory", "3GiB", "--memory-request", "3GiB"});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("held outside every tenant"), std::string::npos) << r.err;
}

TEST_F(OutsideUsage, LendingShrinksByItSoTheGuaranteeIsMet) {
  start_host_job();
  // 4 GiB - 2.1 GiB outside - 1 GiB guaranteed: 960 MiB is left to lend.
  create_tenant("guaranteed", "1GiB", "1GiB");
  create_tenant("borrower", "4GiB", "0");
  BackgroundProcess borrower(
      {FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(64 * kMiB), "--hold", "1"},
      tenant_env("borrower"), dir_.path() + "/borrower");
  ASSERT_EQ(borrower.wait_until_ready(
                [&] { return borrower.out().find("\"holding\"") != std::string::npos; },
                std::chrono::seconds(15)),
            "")
      << borrower.err();
  const json filled =
      json::parse(borrower.out().substr(0, borrower.out().find('\n')), nullptr, false);
  // Its context and 14 chunks of 64 MiB: 960 MiB; not the 1.9 GiB the GPU had free.
  EXPECT_EQ(filled.value("allocated", uint64_t{0}) + 64 * kMiB, 960 * kMiB) << borrower.out();
  EXPECT_NE(borrower.err().find("held by processes outside every tenant"), std::string::npos)
      << borrower.err();
  // The guaranteed tenant gets all of its request at once.
  BackgroundProcess holder(
      {FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(1 * kGiB - 64 * kMiB)},
      tenant_env("guaranteed"), dir_.path() + "/holder");
  EXPECT_EQ(
      holder.wait_until_ready([&] { return holder.out().find("\"holding\"") != std::string::npos; },
                              std::chrono::seconds(3)),
      "")
      << holder.err();
}

class OutsideUsageFracgpuOnly : public OutsideUsage {
 protected:
  void SetUp() override {
    fracgpu_only_ = true;
    OutsideUsage::SetUp();
  }
};

TEST_F(OutsideUsageFracgpuOnly, ItIsReportedOnceAsAnOutsideViolation) {
  start_host_job();
  const std::string pid = std::to_string(host_job_->pid());
  wait_until([&] { return gpu_status()["outside"]["violations"].value("total", uint64_t{0}) >= 1; },
             std::chrono::seconds(3));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // five more audit passes
  const json v = gpu_status()["outside"]["violations"];
  EXPECT_EQ(v.value("reported", false), true);
  EXPECT_EQ(v.value("total", uint64_t{0}), 1u) << "one episode, reported once";
  ASSERT_EQ(v["recent"].size(), 1u) << v.dump();
  EXPECT_EQ(v["recent"][0].value("kind", ""), "outside");
  EXPECT_EQ(v["recent"][0].value("pid", 0), host_job_->pid());
  EXPECT_EQ(v["recent"][0].value("action", ""), "logged");
  EXPECT_TRUE(host_job_->running()) << "a process in no tenant is never stopped";
  EXPECT_NE(read_text(dir_.path() + "/broker-1.log")
                .find("violation (outside): pid " + pid + " holds 2.1 GiB on GPU 0 in no tenant"),
            std::string::npos);
  EXPECT_EQ(sample_value(http_get(port_, "/metrics"), "fracgpu_gpu_outside_violations_total"), 1.0);
  ProcessResult table = cli({"status"});
  EXPECT_NE(table.out.find("warning: GPU 0: 1 outside violation(s)"), std::string::npos)
      << table.out;
}

TEST_F(OutsideUsage, WithoutFracgpuOnlyItIsCountedButNotReported) {
  start_host_job();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const json v = gpu_status()["outside"]["violations"];
  EXPECT_EQ(v.value("reported", true), false);
  EXPECT_EQ(v.value("total", uint64_t{1}), 0u);
  EXPECT_EQ(read_text(dir_.path() + "/broker-1.log").find("violation (outside)"),
            std::string::npos);
  // Still out of what can be guaranteed.
  ProcessResult r = cli({"tenant", "create", "big", "--memory", "3GiB", "--gpu", "0"});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("held outside every tenant"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fracgpu::testing
