// The node's memory as the broker reads it (broker/core/host_memory.h): MemAvailable of a
// /proc/meminfo file in bytes; a file without the line, a malformed line, another unit or a
// missing file give nothing (the swap reserves then follow the host budget alone).
#include "core/host_memory.h"

#include <gtest/gtest.h>

#include <fstream>

#include "temp_dir.h"

namespace fracgpu::broker {
namespace {

class HostMemory : public ::testing::Test {
 protected:
  std::string meminfo(const std::string& text) {
    const std::string path = (dir_.path() / "meminfo").string();
    std::ofstream(path) << text;
    return path;
  }
  testing::TempDir dir_;
};

TEST_F(HostMemory, MemAvailableIsReadInBytes) {
  EXPECT_EQ(mem_available(meminfo("MemTotal:       131072000 kB\n"
                                  "MemFree:         1000 kB\n"
                                  "MemAvailable:   12345678 kB\n"
                                  "Buffers:         20 kB\n")),
            12345678ull << 10);
}

TEST_F(HostMemory, WithoutAWellFormedLineThereIsNothing) {
  EXPECT_EQ(mem_available(meminfo("MemTotal: 1 kB\nMemFree: 1 kB\n")), std::nullopt);
  EXPECT_EQ(mem_available(meminfo("MemAvailable: lots kB\n")), std::nullopt);
  EXPECT_EQ(mem_available(meminfo("MemAvailable: 12 MB\n")), std::nullopt);
  EXPECT_EQ(mem_available(meminfo("MemAvailable: 99999999999999999999999 kB\n")), std::nullopt);
  EXPECT_EQ(mem_available(meminfo("")), std::nullopt);
  EXPECT_EQ(mem_available((dir_.path() / "none").string()), std::nullopt);
}

TEST_F(HostMemory, TheRealNodeSaysSomething) {
  EXPECT_GT(node_memory_bytes(), 0u);
  const auto available = mem_available();
  ASSERT_TRUE(available.has_value());
  EXPECT_LE(*available, node_memory_bytes());
}

}  // namespace
}  // namespace fracgpu::broker
