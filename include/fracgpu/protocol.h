// The broker's control-plane protocol: newline-delimited JSON over Unix stream
// sockets. One request per line (at most kMaxMessageBytes), one reply line each.
// Every reply has "ok": true|false; failures carry "error": "<one clear sentence>".
// A peer that sends a line that is not a JSON object, or an over-long line, gets one
// error reply and is disconnected; the broker itself never exits over bad input.
//
// Tenant socket (<run_dir>/tenants|pods/<name>/broker.sock; in a pod /run/fracgpu/broker.sock).
// Identity is the socket; the process is SO_PEERCRED's pid — nothing the peer claims. At
// accept the broker admits only root, its own uid and the tenant's owners (any uid for a
// tenant without owners, whose socket only its pod can reach); others get one error reply
// naming their uid and the tenant (never the owners' uids), and are disconnected.
//   {"op":"register","protocol":2}
//     -> {"ok":true,"protocol":2,"tenant":"a","slot":12,"quota":"quota","ledger_fd":true}
//        with the tenant's ledger as a read-write descriptor (SCM_RIGHTS, with the reply's
//        first byte): the ledger has no path a tenant can reach. "quota" is a file name
//        relative to the socket's directory, opened read-only by path — in a pod, through
//        its read-only mount. A tenant WITH owners (a host tenant, whose quota file is 0600:
//        paths.h) adds "quota_fd":true and passes the quota as a second, READ-ONLY
//        descriptor in the same SCM_RIGHTS message, which the shim maps instead (older
//        shims close it and fail to open the file by path: they fail closed). The broker filled
//        the slot's pid/start_time/state before replying; the connection stays open for
//        the life of the process — its hang-up or pidfd tells the broker the process is
//        gone. A protocol-1 register (ledger by path) is refused with a sentence.
//        Minor 1 ("protocol_minor":1): a broker started with --mps whose MPS control
//        daemon runs adds "mps_pipe_dir":"/abs", "mps_log_dir":"/abs" (paths on the
//        broker's host: <run_dir>/mps/pipe and /log) and "mps_client_priority":0|1 (0 for
//        a tenant that is high on any GPU, else 1) — unless the process's uid is not the
//        uid the MPS server serves. The shim exports them as CUDA_MPS_PIPE_DIRECTORY,
//        CUDA_MPS_LOG_DIRECTORY and CUDA_MPS_CLIENT_PRIORITY before the driver's cuInit,
//        overriding the process's own; where the host path is not visible (a pod) it uses
//        paths::kContainerMpsPipeDir. Older shims ignore the fields; a reply without them
//        changes nothing.
//        Minor 2: a process registering AGAIN (after a broker restart, or because its ledger
//        was rebuilt: tenant_segment.h, "A ledger lost") adds
//          "slot":12                    the slot it had: given back when it is free
//          "holdings":[{"device":0,"used":N,"swapped":N}...]
//                                       what it holds per device (index into
//                                       TenantQuota.devices; swapped: bytes on host), which
//                                       the broker re-charges into its slot, bounded
//        and the reply then says what was charged: "recharged":[{"device":0,"used":N,
//        "swapped":N,"basis":"claimed"|"device"|"cap"|"booked"}...] (basis: the claim as
//        sent, raised or lowered to the device's per-process usage, cut to the cap, or
//        what the slot booked already). A malformed "slot" or "holdings" is refused with a
//        sentence. Older brokers ignore both fields (nothing is re-charged).
//   {"op":"view","protocol":2}
//     -> {"ok":true,"protocol":2,"tenant":"a","quota":"quota","ledger_fd":true} with a
//        READ-ONLY ledger descriptor (and "quota_fd":true with the quota's, as for
//        "register"), and no slot: for processes that only report usage
//        (nvidia-smi's NVML queries); the shim then closes the connection
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
//   TENANT = {"name":"a","owners":[1000],"devices":[{"gpu":0,"memory_limit":N,"memory_request":N,
//             "compute":30,"compute_limit":0,"priority":"normal"}]}
//            In "create", "memory_limit":"available" asks for the GPU's capacity minus the
//            other tenants' requests at that moment (refused when that is nothing), and
//            the request then defaults to 0; the tenant is kept and reported with the number.
//            "owners" (optional, at most 64 distinct uids): who may register; empty or absent
//            = a Kubernetes tenant (any uid that can reach its socket, which only its pod's
//            mount can). An update may change the owners but not turn an owned tenant into
//            an owner-less one or back (the two live in different directories).
//            "pod" (optional): {"namespace":"ml","pod":"trainer-0","container":"main"}, the
//            Kubernetes container of the tenant (Kubernetes name rules; {} clears it); the
//            device plugin sets it with an update naming only "name" and "pod", which the
//            broker applies without admission and without touching the quota.
//   GPU    = {"index":0,"uuid":"GPU-...","name":"...","memory_total":N}
//   TENANT_STATUS = TENANT + {"socket":"/abs/path/broker.sock","run_dir":"/abs/path" (the
//             tenant's directory: what the device plugin mounts into the pod),
//             "devices":[{..., "memory_used":N,"memory_peak":N,"memory_grant":N,
//             "oom_events":N}], "processes":[{"pid":N,"slot":N,"memory_used":[N...]}]}
#pragma once

#include <cstddef>

namespace fracgpu::protocol {

inline constexpr int kVersion = 2;  // 2: the ledger is passed as a descriptor
// Additions that older peers may ignore: 1 = the register reply's mps_* fields;
// 2 = a re-registration's "slot" and "holdings", the reply's "recharged".
inline constexpr int kMinorVersion = 2;
inline constexpr std::size_t kMaxMessageBytes = 64 * 1024;
// The tenant's quota file, as the register reply names it (paths.h has the rest of the
// run directory's layout). kLedgerFileName is where protocol 1 kept the ledger, beside
// the quota: the broker moves such a file into <run_dir>/ledgers/ when it finds one.
inline constexpr const char* kQuotaFileName = "quota";
inline constexpr const char* kLedgerFileName = "ledger";
// TENANT's "memory_limit" in a create: the memory no other tenant is guaranteed.
inline constexpr const char* kAvailableMemory = "available";

}  // namespace fracgpu::protocol
