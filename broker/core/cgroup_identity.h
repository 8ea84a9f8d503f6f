// Which cgroup says who a process belongs to, from the text of /proc/<pid>/cgroup, for
// the usage audit's attribution (usage_audit.h) whatever the cgroup version:
//   cgroup v2 (and hybrid hosts): "0::/kubepods/.../cri-containerd-<id>.scope"
//   cgroup v1: one line per hierarchy, "4:memory:/kubepods/burstable/pod<uid>/<id>",
//              "1:name=systemd:/kubepods/...", and usually a "0::/" line beside them.
// The identity is the unified ("0::") path when it is not the root; else, on a v1 host,
// the first hierarchy among memory, pids, name=systemd (then any other, in file order)
// whose path is not the root — the ones a container runtime always gives each container
// a cgroup in. It is spelled "<controllers>:<path>" ("0::/a", "memory:/a"), so two
// processes have the same identity only where the same hierarchy places them together.
// Empty when every line says "/" (or nothing is readable): such a cgroup tells nothing
// (a host whose processes all sit at "0::/", a container with a cgroup namespace).
// Pure; cost: one pass over a few hundred bytes, once per process the audit first sees.
#pragma once

#include <string>
#include <string_view>

namespace fracgpu::broker {

std::string cgroup_identity(std::string_view proc_cgroup_text);

}  // namespace fracgpu::broker
