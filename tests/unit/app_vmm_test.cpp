// Unit tests of the application's own VMM memory made swappable (core/app_vmm.h): the
// handle table (identity first, our own value when a driver handle's value still names
// another handle, mappings), the swappable rule, and AppVmm with the swap engine over a
// small simulated VMM device: a swapped handle keeps answering under the application's
// value, comes back intact in a new driver handle, and its unmap and release while on host
// release nothing real and leave the books exact.
#include "core/app_vmm.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/tenant_policies.h"
#include "fake_tenant.h"

namespace fracgpu {
namespace {

using Handle = CUmemGenericAllocationHandle;
using testing::FakeDriver;
using testing::FakeTenant;

constexpr uint64_t kGranule = 2ull << 20;

// --- The table ---

AppHandleTable::Entry created(uint64_t size) {
  AppHandleTable::Entry e;
  e.size = size;
  e.device.index = 0;
  e.created = true;
  return e;
}

TEST(AppHandleTable, TheFirstValueIsTheDriversAndACollidingOneIsOurs) {
  AppHandleTable t;
  EXPECT_EQ(t.add(0x1000, created(kGranule)), 0x1000u);
  EXPECT_EQ(t.find(0x1000)->real, 0x1000u);
  // After a swap-in the handle is a new driver handle; the driver may hand the old value
  // out again: the application must get another value for it.
  t.find(0x1000)->real = 0x2000;
  const Handle minted = t.add(0x1000, created(kGranule));
  EXPECT_NE(minted, 0x1000u);
  EXPECT_EQ(minted & AppHandleTable::kMintedTag, AppHandleTable::kMintedTag);
  EXPECT_EQ(t.find(minted)->real, 0x1000u);
  EXPECT_EQ(t.find(0x1000)->real, 0x2000u) << "the first handle keeps its value";
  // A driver handle from elsewhere (an import, a retain) is translated the same way.
  EXPECT_EQ(t.value_for(0x3000), 0x3000u) << "no entry: itself";
  t.find(minted)->real = 0x4000;
  const Handle alias = t.value_for(0x1000);
  EXPECT_NE(alias, 0x1000u);
  EXPECT_FALSE(t.find(alias)->created) << "an alias never swaps";
  EXPECT_EQ(t.value_for(0x1000), alias) << "stable: one value per driver handle";
  EXPECT_EQ(t.find(alias)->references, 2) << "each answer is a driver reference";
  t.erase(alias);
  EXPECT_NE(t.value_for(0x1000), alias) << "gone with its entry";
}

TEST(AppHandleTable, MappingsAreFoundByAnyByteAndByRange) {
  AppHandleTable t;
  t.add(0x10, created(kGranule));
  t.add(0x20, created(kGranule));
  t.mapped(0x10, 0x100000000ull, kGranule, 0);
  t.mapped(0x20, 0x100000000ull + kGranule, kGranule, 0);
  EXPECT_EQ(t.mapped_at(0x100000000ull + 5), 0x10u);
  EXPECT_EQ(t.mapped_at(0x100000000ull + kGranule + 7), 0x20u);
  EXPECT_FALSE(t.mapped_at(0x100000000ull + 2 * kGranule));
  EXPECT_EQ(t.mappings_in(0x100000000ull, 2 * kGranule).size(), 2u);
  EXPECT_EQ(t.mappings_in(0x100000000ull + kGranule, kGranule).size(), 1u);
  t.unmapped(0x10, 0x100000000ull);
  EXPECT_FALSE(t.mapped_at(0x100000000ull));
  EXPECT_EQ(t.find(0x10)->mappings, 0);
}

TEST(AppHandleTable, TheSwappableRule) {
  auto ready = [] {
    AppHandleTable::Entry e = created(kGranule);
    e.real = 0x10;
    e.mappings = 1;
    e.va = 0x100000000ull;
    e.whole = true;
    e.access.push_back(CUmemAccessDesc{});
    return e;
  };
  EXPECT_TRUE(AppHandleTable::swappable(ready()));
  AppHandleTable::Entry e = ready();
  e.access.clear();
  EXPECT_FALSE(AppHandleTable::swappable(e)) << "no access set yet";
  e = ready();
  e.mappings = 2;
  EXPECT_FALSE(AppHandleTable::swappable(e)) << "mapped twice";
  e = ready();
  e.mappings = 0;
  EXPECT_FALSE(AppHandleTable::swappable(e)) << "created but unmapped";
  e = ready();
  e.whole = false;
  EXPECT_FALSE(AppHandleTable::swappable(e)) << "mapped in part";
  e = ready();
  e.exported = true;
  EXPECT_FALSE(AppHandleTable::swappable(e)) << "exported";
  e = ready();
  e.created = false;
  EXPECT_FALSE(AppHandleTable::swappable(e)) << "imported";
  e = ready();
  e.size = kGranule + 4096;
  EXPECT_FALSE(AppHandleTable::swappable(e)) << "not whole host pages";

  // The table derives `whole` and the single mapping itself.
  AppHandleTable t;
  t.add(0x10, created(2 * kGranule));
  t.mapped(0x10, 0x100000000ull, kGranule, 0);
  EXPECT_FALSE(t.find(0x10)->whole) << "half of it";
  t.unmapped(0x10, 0x100000000ull);
  t.mapped(0x10, 0x100000000ull, 2 * kGranule, 0);
  EXPECT_TRUE(t.find(0x10)->whole);
  t.mapped(0x10, 0x200000000ull, 2 * kGranule, 0);
  EXPECT_EQ(t.find(0x10)->va, 0u) << "two mappings: neither is its only one";
}

// --- AppVmm and the swap engine over a simulated VMM device ---

// Physical memory as byte vectors, mappings by address, access per mapping; a copy needs
// a mapping with access, as on the real driver.
struct FakeVmm {
  struct Physical {
    std::shared_ptr<std::vector<char>> bytes;
    int references = 1;
    int mappings = 0;
  };
  struct Mapping {
    uint64_t size = 0;
    Handle handle = 0;
    bool access = false;
  };
  static inline std::mutex mutex;
  static inline std::map<Handle, Physical> physical;
  static inline std::map<CUdeviceptr, Mapping> mappings;
  static inline Handle next = 0x1000;
  static inline CUdeviceptr next_va = 0x7000'0000'0000ull;
  static inline int releases = 0;

  static void reset() {
    std::lock_guard<std::mutex> lock(mutex);
    physical.clear();
    mappings.clear();
    releases = 0;
  }
  static void drop_if_unused(Handle h) {
    auto it = physical.find(h);
    if (it != physical.end() && it->second.references == 0 && it->second.mappings == 0)
      physical.erase(it);
  }
  static char* at(CUdeviceptr va, uint64_t bytes) {
    auto it = mappings.upper_bound(va);
    if (it == mappings.begin()) return nullptr;
    --it;
    if (va - it->first + bytes > it->second.size || !it->second.access) return nullptr;
    return physical.at(it->second.handle).bytes->data() + (va - it->first);
  }
  static std::size_t live() {
    std::lock_guard<std::mutex> lock(mutex);
    return physical.size();
  }

  static CUresult create(Handle* h, size_t size, const CUmemAllocationProp*, unsigned long long) {
    std::lock_guard<std::mutex> lock(mutex);
    *h = next++;
    physical[*h] = Physical{std::make_shared<std::vector<char>>(size), 1, 0};
    return CUDA_SUCCESS;
  }
  static CUresult release(Handle h) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = physical.find(h);
    if (it == physical.end() || it->second.references == 0) return CUDA_ERROR_INVALID_VALUE;
    --it->second.references;
    ++releases;
    drop_if_unused(h);
    return CUDA_SUCCESS;
  }
  static CUresult map(CUdeviceptr va, size_t size, size_t, Handle h, unsigned long long) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = physical.find(h);
    if (it == physical.end() || mappings.count(va)) return CUDA_ERROR_INVALID_VALUE;
    ++it->second.mappings;
    mappings[va] = Mapping{size, h, false};
    return CUDA_SUCCESS;
  }
  static CUresult unmap(CUdeviceptr va, size_t size) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = mappings.find(va);
    if (it == mappings.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
    const Handle h = it->second.handle;
    mappings.erase(it);
    --physical.at(h).mappings;
    drop_if_unused(h);
    return CUDA_SUCCESS;
  }
  static CUresult set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc*, size_t count) {
    std::lock_guard<std::mutex> lock(mutex);
    if (count == 0) return CUDA_ERROR_INVALID_VALUE;
    for (auto it = mappings.lower_bound(va); it != mappings.end() && it->first < va + size; ++it)
      it->second.access = true;
    return CUDA_SUCCESS;
  }
  static CUresult properties(CUmemAllocationProp* prop, Handle h) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!physical.count(h)) return CUDA_ERROR_INVALID_VALUE;
    *prop = CUmemAllocationProp{};
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    return CUDA_SUCCESS;
  }
  static CUresult retain(Handle* h, void* addr) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = mappings.upper_bound(reinterpret_cast<CUdeviceptr>(addr));
    if (it == mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
    --it;
    *h = it->second.handle;
    ++physical.at(*h).references;
    return CUDA_SUCCESS;
  }
  static CUresult reserve(CUdeviceptr* va, size_t size, size_t, CUdeviceptr, unsigned long long) {
    std::lock_guard<std::mutex> lock(mutex);
    *va = next_va;
    next_va += (size + kGranule - 1) / kGranule * kGranule + kGranule;
    return CUDA_SUCCESS;
  }
  static CUresult free_range(CUdeviceptr, size_t) { return CUDA_SUCCESS; }
  static CUresult dtoh(void* dst, CUdeviceptr src, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    const char* p = at(src, bytes);
    if (p == nullptr) return CUDA_ERROR_ILLEGAL_ADDRESS;
    std::memcpy(dst, p, bytes);
    return CUDA_SUCCESS;
  }
  static CUresult htod(CUdeviceptr dst, const void* src, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    char* p = at(dst, bytes);
    if (p == nullptr) return CUDA_ERROR_ILLEGAL_ADDRESS;
    std::memcpy(p, src, bytes);
    return CUDA_SUCCESS;
  }
  static CUresult host_alloc(void** p, size_t bytes, unsigned) {
    *p = std::malloc(bytes);
    return *p != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  }
  static CUresult free_host(void* p) {
    std::free(p);
    return CUDA_SUCCESS;
  }
  static CUresult granularity(size_t* g, const CUmemAllocationProp*,
                              CUmemAllocationGranularity_flags) {
    *g = kGranule;
    return CUDA_SUCCESS;
  }
  static CUresult synchronize() { return CUDA_SUCCESS; }

  static void install(DriverCalls& c) {
    c.cuMemCreate = create;
    c.cuMemRelease = release;
    c.cuMemMap = map;
    c.cuMemUnmap = unmap;
    c.cuMemSetAccess = set_access;
    c.cuMemAddressReserve = reserve;
    c.cuMemAddressFree = free_range;
    c.cuMemcpyDtoH = dtoh;
    c.cuMemcpyHtoD = htod;
    c.cuMemHostAlloc = host_alloc;
    c.cuMemFreeHost = free_host;
    c.cuMemHostRegister = nullptr;  // host copies by cuMemHostAlloc
    c.cuMemHostUnregister = nullptr;
    c.cuMemGetAllocationGranularity = granularity;
    c.cuCtxSynchronize = synchronize;
  }
};

// The policies live until exit (the swap thread runs as long as the process): leaked on
// purpose, as the preload layer does.
struct Process {
  FakeTenant tenant{1ull << 30, 1ull << 30};
  DriverCalls calls = FakeDriver::calls();
  FenceOps fences = FakeDriver::fence_ops();
  CaptureTracker captures;
  std::unique_ptr<TenantPolicies> policies;
};

// Every Process made, for as long as the test executable runs.
std::vector<Process*>& living() {
  static auto* processes = new std::vector<Process*>;
  return *processes;
}

class AppVmmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeDriver::reset();
    FakeVmm::reset();
    s_ = new Process();      // never deleted: see Process
    living().push_back(s_);  // ...but reachable, so LeakSanitizer does not call it a leak
    FakeVmm::install(s_->calls);
    s_->captures.init(FakeDriver::capture_ops());
    DeviceQuota& d = s_->tenant.quota_map().devices[0];
    d.swap_policy.store(kSwapAllow);
    d.resident_target.store(kNoResidentTarget);
    s_->policies = std::make_unique<TenantPolicies>(s_->tenant, s_->calls, s_->fences, s_->captures,
                                                    "/nonexistent/doorbell");
  }
  AppVmm& vmm() { return s_->policies->app_vmm; }
  SwapEngine& swap() { return s_->policies->swap; }
  MemoryLedger& ledger() { return s_->tenant.ledger(); }

  // The expandable-segments pattern for one handle: create, map, grant access, fill.
  Handle segment(CUdeviceptr* va, char fill) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    Handle h = 0;
    EXPECT_EQ(vmm().create(&h, kGranule, &prop, 0, FakeVmm::create), CUDA_SUCCESS);
    EXPECT_EQ(FakeVmm::reserve(va, kGranule, 0, 0, 0), CUDA_SUCCESS);
    EXPECT_EQ(vmm().map(*va, kGranule, 0, h, 0, FakeVmm::map), CUDA_SUCCESS);
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    EXPECT_EQ(vmm().set_access(*va, kGranule, &access, 1, FakeVmm::set_access), CUDA_SUCCESS);
    std::vector<char> bytes(kGranule, fill);
    EXPECT_EQ(FakeVmm::htod(*va, bytes.data(), kGranule), CUDA_SUCCESS);
    return h;
  }
  void swap_out_all() {
    s_->tenant.quota_map().devices[0].resident_target.store(0);
    swap().swap_out(0, 0);  // or the swap thread did it first
    s_->tenant.quota_map().devices[0].resident_target.store(kNoResidentTarget);
  }
  // What an application call that touches device memory does first.
  void touch() { SwapEngine::Section section(swap()); }

  Process* s_ = nullptr;
};

TEST_F(AppVmmTest, ASwappedHandleComesBackIntactUnderTheApplicationsValue) {
  CUdeviceptr va = 0;
  const Handle h = segment(&va, 'x');
  EXPECT_EQ(FakeVmm::physical.count(h), 1u) << "identity before any move";
  EXPECT_EQ(ledger().used(0), kGranule);

  swap_out_all();
  EXPECT_EQ(swap().swapped_bytes(), kGranule);
  EXPECT_EQ(ledger().used(0), 0u);
  EXPECT_EQ(ledger().swapped(0), kGranule);
  EXPECT_EQ(FakeVmm::live(), 0u) << "the physical memory is gone";
  CUmemAllocationProp prop{};
  EXPECT_EQ(vmm().properties(&prop, h, FakeVmm::properties), CUDA_SUCCESS) << "on host, still";
  EXPECT_EQ(prop.location.type, CU_MEM_LOCATION_TYPE_DEVICE);

  touch();
  EXPECT_EQ(swap().swapped_bytes(), 0u);
  EXPECT_EQ(ledger().used(0), kGranule);
  EXPECT_EQ(ledger().swapped(0), 0u);
  std::vector<char> back(kGranule);
  ASSERT_EQ(FakeVmm::dtoh(back.data(), va, kGranule), CUDA_SUCCESS) << "access set again";
  EXPECT_EQ(back, std::vector<char>(kGranule, 'x'));
  ASSERT_EQ(FakeVmm::live(), 1u);
  const Handle now = FakeVmm::physical.begin()->first;
  EXPECT_NE(now, h) << "a new driver handle";
  EXPECT_EQ(vmm().properties(&prop, h, FakeVmm::properties), CUDA_SUCCESS);
  Handle retained = 0;
  EXPECT_EQ(vmm().retain(&retained, reinterpret_cast<void*>(va + 64), FakeVmm::retain),
            CUDA_SUCCESS);
  EXPECT_EQ(retained, h) << "the application's value, not the driver's";
  EXPECT_EQ(vmm().release(retained, FakeVmm::release), CUDA_SUCCESS);
  EXPECT_EQ(FakeVmm::physical.at(now).references, 1) << "the retain was ours";

  // The application frees it as PyTorch does: unmap, then release.
  EXPECT_EQ(vmm().unmap(va, kGranule, FakeVmm::unmap), CUDA_SUCCESS);
  EXPECT_EQ(vmm().release(h, FakeVmm::release), CUDA_SUCCESS);
  EXPECT_EQ(FakeVmm::live(), 0u) << "the new handle was released, under the old value";
  EXPECT_EQ(ledger().used(0), 0u);
  EXPECT_EQ(vmm().handles(), 0u);
  EXPECT_EQ(s_->policies->vmm.charged_handles(), 0u);
}

TEST_F(AppVmmTest, UnmapAndReleaseOfASwappedHandleReleaseNothingRealAndLeaveTheBooks) {
  CUdeviceptr va = 0, other = 0;
  const Handle h = segment(&va, 'a');
  segment(&other, 'b');
  swap_out_all();
  ASSERT_EQ(ledger().swapped(0), 2 * kGranule);
  const int releases = FakeVmm::releases;
  EXPECT_EQ(vmm().unmap(va, kGranule, FakeVmm::unmap), CUDA_SUCCESS)
      << "nothing is mapped there really: the driver is not asked";
  EXPECT_EQ(ledger().swapped(0), 2 * kGranule) << "the handle still holds its bytes, on host";
  EXPECT_EQ(swap().swapped_bytes(), kGranule) << "the engine moves only the mapped one";
  EXPECT_EQ(vmm().release(h, FakeVmm::release), CUDA_SUCCESS);
  EXPECT_EQ(FakeVmm::releases, releases) << "no real handle to release";
  EXPECT_EQ(ledger().swapped(0), kGranule);
  EXPECT_EQ(ledger().used(0), 0u);
  EXPECT_EQ(s_->policies->vmm.charged_handles(), 1u);
  touch();
  EXPECT_EQ(ledger().used(0), kGranule);
  EXPECT_EQ(ledger().swapped(0), 0u);
}

TEST_F(AppVmmTest, AnUnmappedHandleOnHostComesBackWhenMappedAgain) {
  CUdeviceptr va = 0;
  const Handle h = segment(&va, 'r');
  swap_out_all();
  ASSERT_EQ(vmm().unmap(va, kGranule, FakeVmm::unmap), CUDA_SUCCESS);
  CUdeviceptr again = 0;
  ASSERT_EQ(FakeVmm::reserve(&again, kGranule, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(vmm().map(again, kGranule, 0, h, 0, FakeVmm::map), CUDA_SUCCESS);
  EXPECT_EQ(ledger().used(0), kGranule);
  EXPECT_EQ(ledger().swapped(0), 0u);
  CUmemAccessDesc access{};
  access.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(vmm().set_access(again, kGranule, &access, 1, FakeVmm::set_access), CUDA_SUCCESS);
  std::vector<char> back(kGranule);
  ASSERT_EQ(FakeVmm::dtoh(back.data(), again, kGranule), CUDA_SUCCESS);
  EXPECT_EQ(back, std::vector<char>(kGranule, 'r'));
}

TEST_F(AppVmmTest, ExportedOrTwiceMappedHandlesStayResident) {
  CUdeviceptr a = 0, b = 0, c = 0;
  const Handle exported = segment(&a, '1');
  const Handle twice = segment(&b, '2');
  segment(&c, '3');
  EXPECT_EQ(vmm().exported(exported), exported) << "identity: nothing moved yet";
  CUdeviceptr second = 0;
  ASSERT_EQ(FakeVmm::reserve(&second, kGranule, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(vmm().map(second, kGranule, 0, twice, 0, FakeVmm::map), CUDA_SUCCESS);
  swap_out_all();
  EXPECT_EQ(swap().swapped_bytes(), kGranule) << "only the third one moves";
  EXPECT_EQ(ledger().used(0), 2 * kGranule) << "what stays is what the broker reports pinned";
  // Unmapping the first mapping of the twice-mapped handle takes it out of the engine.
  EXPECT_EQ(swap().backed_allocations(), 3u);
  EXPECT_EQ(vmm().unmap(b, kGranule, FakeVmm::unmap), CUDA_SUCCESS);
  EXPECT_EQ(swap().backed_allocations(), 2u);
  EXPECT_EQ(vmm().unmap(second, kGranule, FakeVmm::unmap), CUDA_SUCCESS);
  EXPECT_EQ(vmm().release(twice, FakeVmm::release), CUDA_SUCCESS);
  EXPECT_EQ(ledger().used(0), kGranule);
  EXPECT_EQ(vmm().handles(), 2u);
}

TEST_F(AppVmmTest, ATenantThatNeverSwapsIsNotTracked) {
  s_->tenant.quota_map().devices[0].swap_policy.store(kSwapNever);
  CUdeviceptr va = 0;
  const Handle h = segment(&va, 'n');
  EXPECT_FALSE(vmm().active());
  EXPECT_EQ(FakeVmm::physical.count(h), 1u);
  swap_out_all();
  EXPECT_EQ(swap().swapped_bytes(), 0u);
  EXPECT_EQ(vmm().unmap(va, kGranule, FakeVmm::unmap), CUDA_SUCCESS);
  EXPECT_EQ(vmm().release(h, FakeVmm::release), CUDA_SUCCESS);
  EXPECT_EQ(ledger().used(0), 0u);
}

}  // namespace
}  // namespace fracgpu
