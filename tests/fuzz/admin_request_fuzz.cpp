// Fuzzer of the admin socket: the bytes a root peer sends on admin.sock, framed into
// requests as LineServer does and handled by AdminServer::handle — op dispatch, field
// validation, then TenantRegistry (tenant_spec_from_json, apply_tenant_update, admission,
// the quota and ledger files, tenants.json) through FuzzAdminBackend. Each input is one
// connection's worth of requests on an empty node, so a create followed by updates and a
// delete is explored as a sequence. Checked: every reply is well formed, a handler never
// throws, after each request the served tenants are admitted, published as defined and
// exactly what tenants.json holds, and no connection leaves a descriptor open. Seeds:
// corpus/admin_request/ (what the CLI and the device plugin send).
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include "core/admin_server.h"
#include "core/event_loop.h"
#include "fuzz_admin_backend.h"
#include "fuzz_support.h"

namespace {

using namespace fracgpu;

struct Harness {
  broker::EventLoop loop;  // never run: AdminServer needs one to exist, not to listen
  fuzz::FuzzAdminBackend backend{fuzz::scratch_dir()};
  broker::AdminServer server{loop, backend, ::geteuid()};
  broker::Peer root;

  Harness() {
    root.cred.pid = ::getpid();
    root.cred.uid = 0;
    root.cred.gid = 0;
  }
};

Harness& harness() {
  static Harness* h = new Harness();  // never destroyed: no teardown order at exit
  return *h;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_logging();
  harness();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Harness& h = harness();
  for (const nlohmann::json& request : fuzz::request_lines(fuzz::as_text(data, size))) {
    const nlohmann::json reply = fuzz::handle_request(
        request, [&](const nlohmann::json& r) { return h.server.handle(h.root, r); });
    const auto op_field = request.find("op");
    const std::string op =
        op_field != request.end() && op_field->is_string() ? op_field->get<std::string>() : "";
    if (reply["ok"] == true && (op == "create" || op == "update")) {
      const auto tenant = reply.find("tenant");
      FUZZ_CHECK(tenant != reply.end() && tenant->is_object(), "a " + op + " reply without it");
      const std::string name = tenant->value("name", "");
      FUZZ_CHECK(h.backend.registry().find(name) != nullptr,
                 "the " + op + " of " + name + " succeeded but the tenant is not served");
    }
    h.backend.check_books();
  }
  h.backend.reset();
  fuzz::check_descriptors("an admin connection");
  return 0;
}
