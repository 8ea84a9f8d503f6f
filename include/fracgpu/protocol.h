// The broker's control-plane protocol: newline-delimited JSON over Unix stream
// sockets. One request per line (at most kMaxMessageBytes), one reply line each.
// Every reply has "ok": true|false; failures carry "error": "<one clear sentence>".
// A peer that sends a line that is not a JSON object, or an over-long line, gets one
// error reply and is disconnected; the broker itself never exits over bad input.
//
// Tenant socket (<run_dir>/tenants/<name>/broker.sock; in a pod /run/fracgpu/broker.sock).
// Identity is the socket; the process is SO_PEERCRED's pid — nothing the peer claims.
//   {"op":"register","protocol":1}
//     -> {"ok":true,"protocol":1,"tenant":"a","slot":12,"quota":"quota","ledger":"ledger"}
//        (file names relative to the socket's directory; the broker filled the slot's
//        pid/start_time/state before replying; the connection stays open for the life
//        of the process — its hang-up or pidfd tells the broker the process is gone)
//   {"op":"burst","device":0,"bytes":1048576}   device = index into TenantQuota.devices
//     -> {"ok":true,"grant":N}  grant raised so that used+bytes fits, or
//        {"ok":false,"error":"..."} when the limit or other tenants' guarantees forbid it
//
// Admin socket (<run_dir>/admin.sock; root, or the broker's own uid).
//   {"op":"create","tenant":TENANT}  -> {"ok":true,"tenant":TENANT_STATUS}
//   {"op":"update","tenant":TENANT}  -> {"ok":true,"tenant":TENANT_STATUS}  (partial: given fields)
//   {"op":"delete","name":"a"}       -> {"ok":true}
//   {"op":"list"}                    -> {"ok":true,"tenants":[TENANT_STATUS...],"gpus":[GPU...]}
//   {"op":"gpus"}                    -> {"ok":true,"gpus":[GPU...]}
//   TENANT = {"name":"a","devices":[{"gpu":0,"memory_limit":N,"memory_request":N,
//             "compute":30,"compute_limit":0,"priority":"normal"}]}
//            In "create", "memory_limit":"available" asks for the GPU's capacity minus the
//            other tenants' requests at that moment (refused when that is nothing), and
//            the request then defaults to 0; the tenant is kept and reported with the number.
//   GPU    = {"index":0,"uuid":"GPU-...","name":"...","memory_total":N}
//   TENANT_STATUS = TENANT + {"socket":"/abs/path/broker.sock","run_dir":"/abs/path",
//             "devices":[{..., "memory_used":N,"memory_peak":N,"memory_grant":N,
//             "oom_events":N}], "processes":[{"pid":N,"slot":N,"memory_used":[N...]}]}
#pragma once

#include <cstddef>

namespace fracgpu::protocol {

inline constexpr int kVersion = 1;
inline constexpr std::size_t kMaxMessageBytes = 64 * 1024;
// The tenant's segment files, as the register reply names them (paths.h has the rest
// of the run directory's layout).
inline constexpr const char* kQuotaFileName = "quota";
inline constexpr const char* kLedgerFileName = "ledger";
// TENANT's "memory_limit" in a create: the memory no other tenant is guaranteed.
inline constexpr const char* kAvailableMemory = "available";

}  // namespace fracgpu::protocol
