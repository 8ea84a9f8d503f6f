// `fracgpu demo`: fracgpu's memory isolation shown in half a minute on the simulated GPU,
// for machines without an NVIDIA GPU (and for newcomers on machines with one).
#pragma once

namespace fracgpu::cli {

int run_demo();

}  // namespace fracgpu::cli
