#include "runtime/device/cpu/cpu_arena.h"

#include <gtest/gtest.h>

#include <memory>

namespace sluice {
namespace {

constexpr size_t kAlign = 256;

std::unique_ptr<CpuArena> MakeArena(uint64_t capacity) {
  Result<std::unique_ptr<CpuArena>> arena = CpuArena::Create(capacity, kAlign);
  EXPECT_TRUE(arena.ok()) << arena.status().ToString();
  return arena.ok() ? std::move(arena).value() : nullptr;
}

TEST(CpuArena, RejectsCapacitiesThatAreNotAlignedMultiples) {
  EXPECT_EQ(CpuArena::Create(0, kAlign).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuArena::Create(1000, kAlign).status().code(), StatusCode::kInvalidArgument);
}

TEST(CpuArena, RoundsUpToTheAlignmentAndStaysInside) {
  auto arena = MakeArena(4096);
  ASSERT_NE(arena, nullptr);
  char* a = static_cast<char*>(arena->Allocate(1));
  char* b = static_cast<char*>(arena->Allocate(257));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a, arena->base());
  EXPECT_EQ(b, arena->base() + 256);
  EXPECT_EQ(arena->stats().used, 256u + 512u);
  EXPECT_TRUE(arena->Contains(b, 512));
  EXPECT_TRUE(arena->Contains(arena->base(), 4096));
  EXPECT_FALSE(arena->Contains(arena->base() + 1, 4096));
  EXPECT_FALSE(arena->Contains(arena->base() - 1, 1));
  EXPECT_EQ(arena->Allocate(4097), nullptr);
  arena->Free(a);
  arena->Free(b);
  EXPECT_EQ(arena->stats().used, 0u);
}

TEST(CpuArena, BestFitPicksTheSmallestHoleThatFits) {
  auto arena = MakeArena(16 * 1024);
  ASSERT_NE(arena, nullptr);
  void* a = arena->Allocate(1024);
  void* b = arena->Allocate(3072);  // hole of 3 KiB once freed
  void* c = arena->Allocate(1024);
  void* d = arena->Allocate(2048);  // hole of 2 KiB once freed
  void* e = arena->Allocate(1024);
  void* rest = arena->Allocate(8192);  // the arena is full
  ASSERT_NE(rest, nullptr);
  EXPECT_EQ(arena->stats().largest_free_block, 0u);
  arena->Free(b);
  arena->Free(d);
  EXPECT_EQ(arena->Allocate(2048), d);
  EXPECT_EQ(arena->Allocate(2048), b);  // front of the 3 KiB hole
  EXPECT_EQ(arena->stats().largest_free_block, 1024u);
  EXPECT_EQ(arena->Allocate(2048), nullptr);
  for (void* p : {a, c, e, rest, b, d}) arena->Free(p);
  EXPECT_EQ(arena->stats().largest_free_block, 16u * 1024);
}

TEST(CpuArena, SmallBlocksComeFromTheTopAndLeaveTheHolesOfLargeOnesWhole) {
  // 64 KiB: blocks of up to 1 KiB are small.
  auto arena = MakeArena(64 * 1024);
  ASSERT_NE(arena, nullptr);
  void* a = arena->Allocate(16 * 1024);
  void* b = arena->Allocate(16 * 1024);
  EXPECT_EQ(a, arena->base());
  EXPECT_EQ(b, arena->base() + 16 * 1024);
  arena->Free(a);  // holes: [0, 16 KiB) and [32 KiB, 64 KiB)
  // Best fit alone would put a small block in the smaller hole, where the next 16 KiB block no
  // longer fits; from the top it leaves both holes usable.
  void* small = arena->Allocate(256);
  EXPECT_EQ(small, arena->base() + 64 * 1024 - 256);
  EXPECT_EQ(arena->Allocate(16 * 1024), a);
  void* rest = arena->Allocate(32 * 1024 - 256);
  EXPECT_EQ(rest, arena->base() + 32 * 1024);
  EXPECT_EQ(arena->stats().largest_free_block, 0u);
  for (void* p : {a, b, small, rest}) arena->Free(p);
  EXPECT_EQ(arena->stats().largest_free_block, 64u * 1024);
}

TEST(CpuArena, CoalescesFreedNeighboursIntoOneBlock) {
  auto arena = MakeArena(8 * 1024);
  ASSERT_NE(arena, nullptr);
  void* a = arena->Allocate(2048);
  void* b = arena->Allocate(2048);
  void* c = arena->Allocate(2048);
  void* d = arena->Allocate(2048);
  arena->Free(a);
  arena->Free(c);
  EXPECT_EQ(arena->stats().free_blocks, 2u);
  EXPECT_EQ(arena->stats().largest_free_block, 2048u);
  EXPECT_EQ(arena->Allocate(4096), nullptr);  // 4 KiB free, but not in one piece
  arena->Free(b);                             // a + b + c merge
  EXPECT_EQ(arena->stats().free_blocks, 1u);
  EXPECT_EQ(arena->stats().largest_free_block, 6144u);
  EXPECT_EQ(arena->Allocate(6144), a);
  arena->Free(a);
  arena->Free(d);
  const CpuArena::Stats stats = arena->stats();
  EXPECT_EQ(stats.free_blocks, 1u);
  EXPECT_EQ(stats.allocated_blocks, 0u);
  EXPECT_EQ(stats.largest_free_block, 8192u);
}

TEST(CpuArena, PendingFreeIsReusableOnlyOnItsOwnStream) {
  auto arena = MakeArena(8 * 1024);
  ASSERT_NE(arena, nullptr);
  void* keep = arena->Allocate(4096);
  void* x = arena->Allocate(4096);
  const uint64_t ticket = arena->FreeLater(x, /*stream_id=*/7);
  EXPECT_EQ(arena->stats().pending, 4096u);
  EXPECT_EQ(arena->stats().used, 8192u);
  EXPECT_EQ(arena->Allocate(1024), nullptr);                   // not for synchronous use
  EXPECT_EQ(arena->Allocate(1024, /*stream_id=*/8), nullptr);  // nor for another stream
  void* reused = arena->Allocate(1024, /*stream_id=*/7);
  EXPECT_EQ(reused, x);
  EXPECT_EQ(arena->stats().pending, 3072u);
  arena->CompleteFree(ticket);  // the stream reached the free: the unreused rest is free
  CpuArena::Stats stats = arena->stats();
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.used, 4096u + 1024u);
  EXPECT_EQ(stats.largest_free_block, 3072u);
  arena->Free(reused);
  arena->Free(keep);
  stats = arena->stats();
  EXPECT_EQ(stats.used, 0u);
  EXPECT_EQ(stats.free_blocks, 1u);
}

TEST(CpuArena, CompletingAFullyReusedFreeChangesNothing) {
  auto arena = MakeArena(4096);
  ASSERT_NE(arena, nullptr);
  void* x = arena->Allocate(4096);
  const uint64_t ticket = arena->FreeLater(x, 3);
  void* y = arena->Allocate(4096, 3);
  EXPECT_EQ(y, x);
  arena->CompleteFree(ticket);
  EXPECT_EQ(arena->stats().used, 4096u);
  EXPECT_EQ(arena->stats().allocated_blocks, 1u);
  arena->Free(y);
  EXPECT_EQ(arena->stats().used, 0u);
}

TEST(CpuArena, PendingBlocksDoNotMergeUntilCompleted) {
  auto arena = MakeArena(4096);
  ASSERT_NE(arena, nullptr);
  void* a = arena->Allocate(1024);
  void* b = arena->Allocate(1024);
  void* c = arena->Allocate(2048);
  arena->Free(c);
  const uint64_t ta = arena->FreeLater(a, 1);
  const uint64_t tb = arena->FreeLater(b, 2);
  EXPECT_EQ(arena->stats().largest_free_block, 2048u);
  arena->CompleteFree(tb);  // b merges with the free c
  EXPECT_EQ(arena->stats().largest_free_block, 3072u);
  arena->CompleteFree(ta);
  EXPECT_EQ(arena->stats().largest_free_block, 4096u);
  EXPECT_EQ(arena->stats().free_blocks, 1u);
}

}  // namespace
}  // namespace sluice
