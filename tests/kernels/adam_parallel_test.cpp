// The static partition of CPU Adam over threads, and binding to a caller's hwloc cpuset.
#include "kernels/cpu/adam_parallel.h"

#include <gtest/gtest.h>
#include <hwloc.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/thread_binding.h"

namespace sluice::kernels {
namespace {

// An hwloc topology and bitmaps freed at scope end.
class Hwloc {
 public:
  Hwloc() {
    hwloc_topology_init(&topology_);
    hwloc_topology_load(topology_);
  }
  ~Hwloc() {
    for (hwloc_bitmap_t b : bitmaps_) hwloc_bitmap_free(b);
    hwloc_topology_destroy(topology_);
  }
  hwloc_bitmap_t NewBitmap() { return bitmaps_.emplace_back(hwloc_bitmap_alloc()); }
  hwloc_bitmap_t ThreadBinding() {
    hwloc_bitmap_t set = NewBitmap();
    EXPECT_EQ(hwloc_get_cpubind(topology_, set, HWLOC_CPUBIND_THREAD), 0);
    return set;
  }
  hwloc_const_cpuset_t Allowed() { return hwloc_topology_get_allowed_cpuset(topology_); }

 private:
  hwloc_topology_t topology_ = nullptr;
  std::vector<hwloc_bitmap_t> bitmaps_;
};

TEST(ForEachAdamRange, CoversEveryElementOnceWithLineAlignedBoundaries) {
  std::vector<float> storage(3 * kAdamTileElements + 64);
  for (size_t count : {size_t{1}, size_t{15}, kAdamTileElements, kAdamTileElements + 1,
                       3 * kAdamTileElements + 17}) {
    for (size_t offset : {size_t{0}, size_t{3}}) {
      for (int threads : {1, 2, 3, 7}) {
        SCOPED_TRACE(testing::Message()
                     << "count " << count << " offset " << offset << " threads " << threads);
        const float* anchor = storage.data() + offset;
        std::vector<std::atomic<int>> hits(count);
        std::mutex mutex;
        std::vector<std::pair<size_t, size_t>> ranges;
        ForEachAdamRange(count, anchor, AdamThreading{.num_threads = threads},
                         [&](size_t begin, size_t end) {
                           for (size_t i = begin; i < end; ++i) hits[i]++;
                           std::lock_guard lock(mutex);
                           ranges.emplace_back(begin, end);
                         });
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(hits[i].load(), 1) << "element " << i;
        EXPECT_LE(ranges.size(), static_cast<size_t>(threads));
        for (auto [begin, end] : ranges) {
          if (begin == 0) continue;
          EXPECT_EQ(reinterpret_cast<uintptr_t>(anchor + begin) % 64, 0u)
              << "range starting at " << begin << " shares a cache line with its neighbour";
        }
      }
    }
  }
}

TEST(ForEachAdamRange, UsesAsManyThreadsAsAskedForLargeRanges) {
  const size_t count = 8 * kAdamTileElements;
  std::vector<float> storage(count);
  std::atomic<int> calls{0};
  ForEachAdamRange(count, storage.data(), AdamThreading{.num_threads = 4},
                   [&](size_t, size_t) { calls++; });
  EXPECT_EQ(calls.load(), 4);
  EXPECT_EQ(AdamThreadCount(AdamThreading{.num_threads = 5}), 5);
  EXPECT_GE(AdamThreadCount(AdamThreading{}), 1);
}

TEST(ThreadBinding, ThreadsRunOnTheCpusetAndTheCallerIsRestored) {
  Hwloc hwloc;
  hwloc_bitmap_t one_cpu = hwloc.NewBitmap();
  hwloc_bitmap_only(one_cpu, hwloc_bitmap_first(hwloc.Allowed()));
  ASSERT_EQ(CpusetError(one_cpu), "");

  hwloc_bitmap_t before = hwloc.ThreadBinding();
  std::mutex mutex;
  std::vector<bool> on_cpuset;
  std::vector<float> storage(4 * kAdamTileElements);
  ForEachAdamRange(storage.size(), storage.data(),
                   AdamThreading{.num_threads = 2, .cpuset = one_cpu}, [&](size_t, size_t) {
                     Hwloc local;
                     bool equal = hwloc_bitmap_isequal(local.ThreadBinding(), one_cpu);
                     std::lock_guard lock(mutex);
                     on_cpuset.push_back(equal);
                   });
  ASSERT_EQ(on_cpuset.size(), 2u);
  EXPECT_TRUE(on_cpuset[0] && on_cpuset[1]) << "a worker ran outside the cpuset";
  EXPECT_TRUE(hwloc_bitmap_isequal(hwloc.ThreadBinding(), before))
      << "the calling thread's binding was not restored";
}

TEST(ThreadBinding, BoundStepMatchesReference) {
  Hwloc hwloc;
  const size_t n = 5 * kAdamTileElements + 3;
  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = static_cast<float>(i % 97) * 0.01f - 0.5f;
    g[i] = static_cast<float>(i % 31) * 0.1f - 1.5f;
  }
  std::vector<float> rp = p, rm = m, rv = v;
  AdamHyperparams hyper{.lr = 1e-3f, .weight_decay = 0.01f};
  AdamStep(AdamTensors{p.data(), m.data(), v.data(), g.data(), AdamGradType::kF32, nullptr,
                       AdamCopyType::kNone, n},
           hyper, 1.0f, AdamThreading{.num_threads = 3, .cpuset = hwloc.Allowed()});
  AdamStepReference(AdamTensors{rp.data(), rm.data(), rv.data(), g.data(), AdamGradType::kF32,
                                nullptr, AdamCopyType::kNone, n},
                    hyper, 1.0f);
  EXPECT_EQ(p, rp);
  EXPECT_EQ(m, rm);
  EXPECT_EQ(v, rv);
}

TEST(ThreadBinding, BadCpusetsAreRejectedWithTheReason) {
  Hwloc hwloc;
  hwloc_bitmap_t empty = hwloc.NewBitmap();
  EXPECT_EQ(CpusetError(empty), "the cpuset is empty");
  hwloc_bitmap_t outside = hwloc.NewBitmap();
  hwloc_bitmap_only(outside, 4000);
  std::string error = AdamThreadingError(AdamThreading{.cpuset = outside});
  EXPECT_NE(error.find("4000"), std::string::npos) << error;
  EXPECT_NE(error.find("not within"), std::string::npos) << error;
}

}  // namespace
}  // namespace sluice::kernels
