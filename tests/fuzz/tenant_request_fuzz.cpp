// Fuzzer of a tenant socket: the bytes a tenant's process sends on its broker.sock,
// framed as LineServer does and handled by TenantSocketServer::handle — "register" (a
// ledger slot for the calling process, a watch on it, the ledger's descriptor), "view"
// and "burst" (the MemoryArbiter raising the grant, the books check refusing a flagged
// tenant) — against real registry, tracker, reconciler, arbiter and audit objects. The
// caller is this process (its pid is what SO_PEERCRED would give). Each input is one
// connection on a node with two tenants: "t" (the caller's: GPU 0 and GPU 1, swap
// allowed on GPU 0) and "u" (a neighbour guaranteed half of GPU 0). Checked: replies are
// well formed and never thrown; a registration names a watched slot and passes a
// read-write descriptor of the ledger, a view a read-only one (and, t having owners, a
// read-only descriptor of its 0600 quota with either, as announced); every grant stays in
// [request, limit], no GPU's grants add up to more than its capacity, and no connection
// leaves a descriptor open.
// Seeds: corpus/tenant_request/ (what libfracgpu.so sends).
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <map>

#include "core/admission.h"
#include "core/audit_service.h"
#include "core/event_loop.h"
#include "core/ledger_ops.h"
#include "core/ledger_reconciler.h"
#include "core/memory_arbiter.h"
#include "core/process_tracker.h"
#include "core/tenant_socket_server.h"
#include "fuzz_admin_backend.h"
#include "fuzz_support.h"

namespace {

using namespace fracgpu;
using nlohmann::json;

constexpr const char* kTenant = "t";

const json kTenantDefinition = json::parse(R"({"name": "t", "owners": [1000], "devices": [
  {"gpu": 0, "memory_limit": 4294967296, "memory_request": 1073741824, "swap": "allow"},
  {"gpu": 1, "memory_limit": 8589934592, "memory_request": 0, "priority": "high"}]})");
const json kNeighbourDefinition = json::parse(
    R"({"name": "u", "devices": [{"gpu": 0, "memory_limit": 8589934592, "memory_request": 8589934592}]})");

std::vector<uint64_t> capacities(const broker::GpuInventory& gpus) {
  std::vector<uint64_t> out;
  for (const auto& g : gpus.gpus) {
    out.resize(g.index + 1, 0);
    out[g.index] = broker::gpu_capacity(g, fuzz::kFuzzReserve);
  }
  return out;
}

struct Harness {
  broker::EventLoop loop;  // never run: the tracker's pidfds are registered, not polled
  fuzz::FuzzAdminBackend backend{fuzz::scratch_dir()};
  broker::TenantRegistry& registry = backend.registry();
  broker::LedgerReconciler reconciler{registry};
  broker::ProcessTracker tracker{loop, [this](const std::string& tenant, uint32_t slot, pid_t) {
                                   if (broker::Tenant* t = registry.find(tenant))
                                     reconciler.process_died(*t, slot);
                                 }};
  broker::MemoryArbiter arbiter{capacities(backend.gpus())};
  broker::AuditService audit{broker::AuditOptions{.nvml_path = "/nonexistent", .interval_ms = 0},
                             registry, tracker, reconciler, backend.gpus()};
  broker::TenantSocketServer server{
      loop, broker::TenantServices{registry, tracker, reconciler, arbiter, &audit}, kTenant};

  Harness() {
    audit.open();
    for (const json* definition : {&kTenantDefinition, &kNeighbourDefinition}) {
      if (auto t = registry.create(*definition); !t) fuzz::fail("cannot create: " + t.error());
    }
    reset();
  }

  // Back to the node as created, without the cost of re-creating the tenants' files: no
  // process watched or registered, every grant at its request, the books' record taken.
  void reset() {
    for (broker::Tenant* t : registry.all()) {
      tracker.forget_tenant(t->spec.name);
      reconciler.forget(t->spec.name);
      audit.forget(t->spec.name);
      broker::ledger::initialize(t->ledger());
      for (std::size_t i = 0; i < t->spec.devices.size(); ++i)
        t->quota().devices[i].memory_grant.store(t->spec.devices[i].memory_request);
    }
    audit.note_grants();  // as Broker::create_tenant does
  }
};

Harness& harness() {
  static Harness* h = new Harness();  // never destroyed: no teardown order at exit
  return *h;
}

// Grants within [request, limit], and per GPU the requests plus the borrowed memory
// within its capacity (memory_arbiter.h).
void check_grants(Harness& h) {
  std::map<uint32_t, unsigned __int128> committed;
  for (const broker::ArbiterMember& m : h.registry.arbiter_members()) {
    for (uint32_t i = 0; i < m.quota->device_count; ++i) {
      const DeviceQuota& q = m.quota->devices[i];
      const uint64_t grant = q.memory_grant.load(), request = q.memory_request.load();
      FUZZ_CHECK(grant >= request && grant <= q.memory_limit.load(),
                 "tenant " + m.name + " device " + std::to_string(i) + ": grant " +
                     std::to_string(grant) + " outside [request, limit]");
      committed[q.host_index] += grant;
    }
  }
  for (const auto& [gpu, sum] : committed) {
    FUZZ_CHECK(sum <= h.arbiter.capacity(gpu),
               "GPU " + std::to_string(gpu) + ": its grants add up to more than its capacity");
  }
}

void check_registration(Harness& h, const json& reply, const broker::Peer& peer) {
  const auto slot = reply.find("slot");
  FUZZ_CHECK(slot != reply.end() && slot->is_number_unsigned() && *slot < kMaxProcesses,
             "a registration without its slot: " + reply.dump());
  FUZZ_CHECK(peer.pending_fd >= 0, "a registration without the ledger's descriptor");
  FUZZ_CHECK(peer.slot == slot->get<uint32_t>(), "the connection does not keep its slot");
  FUZZ_CHECK(h.tracker.watching(kTenant, slot->get<uint32_t>()),
             "a registered slot is not watched");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_logging();
  harness();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Harness& h = harness();
  broker::Peer peer;
  peer.cred.pid = ::getpid();
  peer.cred.uid = ::geteuid();
  peer.cred.gid = ::getegid();
  for (const json& request : fuzz::request_lines(fuzz::as_text(data, size))) {
    const json reply =
        fuzz::handle_request(request, [&](const json& r) { return h.server.handle(peer, r); });
    if (reply["ok"] == true && request.find("op") != request.end() && request["op"] == "register")
      check_registration(h, reply, peer);
    if (reply["ok"] == true && reply.contains("ledger_fd")) {
      FUZZ_CHECK(peer.pending_fd >= 0, "a reply that promises a descriptor without one");
      // "view" is for readers (nvidia-smi's memory view): its descriptor must not write.
      const int mode = ::fcntl(peer.pending_fd, F_GETFL) & O_ACCMODE;
      FUZZ_CHECK(mode == (request["op"] == "view" ? O_RDONLY : O_RDWR),
                 "the ledger descriptor of a " + request["op"].dump() + " has the wrong access");
    }
    // A host tenant's quota (t has owners) comes as a second, read-only descriptor.
    FUZZ_CHECK((reply["ok"] == true && reply.contains("quota_fd")) == (peer.pending_second_fd >= 0),
               "a quota descriptor the reply does not announce, or the other way round");
    if (peer.pending_second_fd >= 0)
      FUZZ_CHECK((::fcntl(peer.pending_second_fd, F_GETFL) & O_ACCMODE) == O_RDONLY,
                 "a writable quota descriptor");
    if (peer.pending_fd >= 0) {  // LineServer sends them with the reply, then closes them
      ::close(peer.pending_fd);
      peer.pending_fd = -1;
    }
    if (peer.pending_second_fd >= 0) {
      ::close(peer.pending_second_fd);
      peer.pending_second_fd = -1;
    }
    check_grants(h);
  }
  h.reset();
  fuzz::check_descriptors("a tenant connection");
  return 0;
}
