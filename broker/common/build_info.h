// The version and git commit of this build, for `fracgpu --version` / `fracgpu version`.
// The definitions are generated at build time by cmake/BuildInfo.cmake (the commit of the
// checkout, with "-dirty" for uncommitted changes to tracked files; "unknown" outside git;
// -DFRACGPU_GIT_COMMIT=... for a build from a tarball). Only the CLI links them, so a new
// commit relinks one small library, nothing else.
#pragma once

namespace fracgpu::build_info {

const char* version();  // the project's VERSION, e.g. "0.1.0"
const char* commit();   // e.g. "d28724a3f0b1", "d28724a3f0b1-dirty" or "unknown"

}  // namespace fracgpu::build_info
