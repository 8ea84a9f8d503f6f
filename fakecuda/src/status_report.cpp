// Builds the status JSON (see status_report.h). Format, one object:
//   {"shm_name": "/name", "timeslice_us": N, "context_footprint_bytes": N,
//    "devices": [{"index": 0, "capacity_bytes": N, "used_bytes": N,
//                 "peak_used_bytes": N, "busy_us": N, "kernels_executed": N,
//                 "engine_owner_pid": N, "engine_waiters": N, "engine_handoffs": N,
//                 "overlap_violations": N,
//                 "processes": [{"pid": N (host pid), "alive": true, "used_bytes": N,
//                                "busy_us": N, "kernels_executed": N}, ...]}, ...],
//    "mps_servers": [{"pid": N, "pipe_dir": "...", "state": "running"|"stopping",
//                     "uid": N|null, "clients": [{"pid": N, "uid": N, "priority": 0|1}],
//                     "faults": [N per device]}]}
// A process that is an MPS client also carries "mps_server_pid" and "mps_priority".
// Under MPS, busy time is SM time (the fraction of the SMs held x wall time).
// A process is listed under a device while it is alive, and after it exited if it
// ever ran work there (its busy time stays visible until its slot is recycled).
#include "status_report.h"

#include <sstream>

#include "process_table.h"

namespace fakecuda {
namespace {

bool listed(const ProcessRecord& process, uint32_t state, uint32_t device) {
  if (state == static_cast<uint32_t>(ProcessState::Live)) return true;
  if (state != static_cast<uint32_t>(ProcessState::Exited)) return false;
  return process.busy_ns[device].load() != 0 || process.kernels[device].load() != 0;
}

void write_process(std::ostringstream& out, const SegmentLayout* layout,
                   const ProcessRecord& process, bool alive, uint32_t device) {
  out << "{\"pid\": " << reported_pid(process) << ", \"alive\": " << (alive ? "true" : "false")
      << ", \"used_bytes\": " << process.used_bytes[device].load()
      << ", \"busy_us\": " << process.busy_ns[device].load() / 1000
      << ", \"kernels_executed\": " << process.kernels[device].load();
  uint32_t client = 0;
  if (const MpsServerRecord* server =
          alive ? mps_server_of(layout, process.pid, process.start_time, &client) : nullptr) {
    out << ", \"mps_server_pid\": " << server->daemon_pid
        << ", \"mps_priority\": " << server->clients[client].priority;
  }
  out << "}";
}

void write_device(std::ostringstream& out, SegmentLayout* layout, uint32_t device) {
  const DeviceRecord& record = layout->devices[device];
  const EngineRecord& engine = layout->engines[device];
  out << "{\"index\": " << device << ", \"capacity_bytes\": " << record.capacity_bytes
      << ", \"used_bytes\": " << record.used_bytes.load()
      << ", \"peak_used_bytes\": " << record.peak_used_bytes.load()
      << ", \"busy_us\": " << record.busy_ns.load() / 1000
      << ", \"kernels_executed\": " << record.kernels_executed.load()
      << ", \"engine_owner_pid\": " << engine.owner.pid
      << ", \"engine_waiters\": " << engine.waiter_count.load()
      << ", \"engine_handoffs\": " << engine.handoffs.load()
      << ", \"overlap_violations\": " << engine.overlap_violations.load() << ", \"processes\": [";
  bool first = true;
  for (const ProcessRecord& process : layout->processes) {
    uint32_t state = process.state.load();
    if (!listed(process, state, device)) continue;
    if (!first) out << ", ";
    first = false;
    write_process(out, layout, process, state == static_cast<uint32_t>(ProcessState::Live), device);
  }
  out << "]}";
}

std::string quoted(const std::string& text) {
  std::string result = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') result += '\\';
    result += c;
  }
  return result + "\"";
}

void write_mps_servers(std::ostringstream& out, SegmentLayout* layout) {
  out << ", \"mps_servers\": [";
  bool first = true;
  for (MpsServerRecord& server : layout->mps_servers) {
    const uint32_t state = server.state.load();
    if (state != static_cast<uint32_t>(MpsServerState::Running) &&
        state != static_cast<uint32_t>(MpsServerState::Stopping))
      continue;
    if (!process_alive(server.daemon_pid, server.daemon_start_time)) continue;
    MpsLock lock(layout, server);
    mps_purge_dead(layout, server);
    out << (first ? "" : ", ") << "{\"pid\": " << server.daemon_pid
        << ", \"pipe_dir\": " << quoted(server.pipe_dir) << ", \"state\": \""
        << (state == static_cast<uint32_t>(MpsServerState::Running) ? "running" : "stopping")
        << "\", \"uid\": ";
    if (server.uid_set != 0)
      out << server.uid;
    else
      out << "null";
    out << ", \"clients\": [";
    bool first_client = true;
    for (const MpsClientRecord& c : server.clients) {
      if (c.in_use == 0) continue;
      out << (first_client ? "" : ", ") << "{\"pid\": " << c.pid << ", \"uid\": " << c.uid
          << ", \"priority\": " << c.priority << "}";
      first_client = false;
    }
    out << "], \"faults\": [";
    for (uint32_t d = 0; d < layout->device_count; ++d)
      out << (d ? ", " : "") << server.devices[d].faults;
    out << "]}";
    first = false;
  }
  out << "]";
}

}  // namespace

std::string status_json(SegmentLayout* layout, const std::string& segment_name) {
  ProcessTable(layout).sweep_dead();
  std::ostringstream out;
  out << "{\"shm_name\": " << quoted(segment_name) << ", \"timeslice_us\": " << layout->timeslice_us
      << ", \"context_footprint_bytes\": " << layout->context_footprint_bytes << ", \"devices\": [";
  for (uint32_t device = 0; device < layout->device_count; ++device) {
    if (device != 0) out << ", ";
    write_device(out, layout, device);
  }
  out << "]";
  write_mps_servers(out, layout);
  out << "}\n";
  return out.str();
}

void reset_peaks(SegmentLayout* layout) {
  for (uint32_t device = 0; device < layout->device_count; ++device) {
    DeviceRecord& record = layout->devices[device];
    record.peak_used_bytes.store(record.used_bytes.load());
  }
}

}  // namespace fakecuda
