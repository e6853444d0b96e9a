// tests/native/stack_segments_test.cpp: recursion far deeper than a thread's stack, on segments.
#include "stack_segments.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <cstring>

namespace framescope_test {
namespace {

using framescope::internal::acquire_stack_segment;
using framescope::internal::call_on_stack_segment;
using framescope::internal::kStackSegmentBytes;
using framescope::internal::mapped_stack_segments;
using framescope::internal::release_stack_segments_above;
using framescope::internal::set_stack_segment_budget;
using framescope::internal::stack_segments_supported;
using framescope::internal::StackSegment;

// A recursion that uses ~1 KiB of stack per level and moves to the next segment when fewer than
// 64 KiB are left, the way the frame hook does.
struct Recursion {
  uintptr_t low = 0;   // lowest usable address of the stack we run on now
  unsigned level = 0;  // segments in use
  unsigned deepest_level = 0;
  bool out_of_segments = false;
};

uint64_t recurse(Recursion& r, int n);

struct SegmentCall {
  Recursion* r;
  int n;
  uint64_t result;
};

void run_segment_call(void* p) {
  auto* call = static_cast<SegmentCall*>(p);
  call->result = recurse(*call->r, call->n);
}

__attribute__((noinline)) uint64_t recurse(Recursion& r, int n) {
  volatile char pad[1024];
  std::memset(const_cast<char*>(pad), n & 0xff, sizeof pad);
  if (n == 0) return 0;
  // The frame address, not a local's: ASan may keep locals on a fake stack on the heap.
  const uintptr_t here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uint64_t below;
  if (here - r.low < (64u << 10)) {
    StackSegment seg;
    if (!acquire_stack_segment(r.level, &seg)) {
      r.out_of_segments = true;
      return 0;
    }
    const uintptr_t saved_low = r.low;
    r.low = seg.low;
    ++r.level;
    if (r.level > r.deepest_level) r.deepest_level = r.level;
    SegmentCall call{&r, n - 1, 0};
    call_on_stack_segment(seg, run_segment_call, &call);
    --r.level;
    release_stack_segments_above(r.level);
    r.low = saved_low;
    below = call.result;
  } else {
    below = recurse(r, n - 1);
  }
  return below + static_cast<unsigned char>(pad[n % sizeof pad]);  // uses the frame after the call
}

uint64_t expected_sum(int n) {
  uint64_t sum = 0;
  for (int i = 1; i <= n; ++i) sum += static_cast<unsigned char>(i & 0xff);
  return sum;
}

struct ThreadResult {
  int depth;
  uint64_t sum = 0;
  unsigned deepest_level = 0;
  unsigned mapped_after = 0;
  bool out_of_segments = false;
};

// Runs the recursion on a thread with a 256 KiB stack.
void* thread_main(void* p) {
  auto* result = static_cast<ThreadResult*>(p);
  pthread_attr_t attr;
  pthread_getattr_np(pthread_self(), &attr);
  void* addr = nullptr;
  size_t size = 0;
  pthread_attr_getstack(&attr, &addr, &size);
  pthread_attr_destroy(&attr);
  Recursion r;
  r.low = reinterpret_cast<uintptr_t>(addr);
  result->sum = recurse(r, result->depth);
  result->deepest_level = r.deepest_level;
  result->out_of_segments = r.out_of_segments;
  result->mapped_after = mapped_stack_segments();
  return nullptr;
}

ThreadResult run_on_small_thread(int depth) {
  ThreadResult result{depth};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 << 10);
  pthread_t thread;
  EXPECT_EQ(pthread_create(&thread, &attr, thread_main, &result), 0);
  pthread_attr_destroy(&attr);
  pthread_join(thread, nullptr);
  return result;
}

class StackSegmentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!stack_segments_supported()) GTEST_SKIP() << "no stack segments on this platform";
    saved_budget_ = set_stack_segment_budget(size_t(1) << 30);
  }
  void TearDown() override {
    if (stack_segments_supported()) set_stack_segment_budget(saved_budget_);
  }
  size_t saved_budget_ = 0;
};

TEST_F(StackSegmentsTest, RecursionFarBeyondTheThreadStackRunsOnSegments) {
  // 40,000 levels of ~1 KiB: ~40 MiB of stack on a thread that has 256 KiB.
  ThreadResult r = run_on_small_thread(40000);
  EXPECT_FALSE(r.out_of_segments);
  EXPECT_EQ(r.sum, expected_sum(40000));
  EXPECT_GE(r.deepest_level, 3u);  // at least 40 MiB / 16 MiB segments
  EXPECT_EQ(r.mapped_after, 1u);   // deeper segments unmapped on the way back, the first kept
}

TEST_F(StackSegmentsTest, BudgetLimitsTheSegmentsAThreadGets) {
  set_stack_segment_budget(2 * kStackSegmentBytes);
  ThreadResult r = run_on_small_thread(40000);
  EXPECT_TRUE(r.out_of_segments);
  EXPECT_EQ(r.deepest_level, 2u);
  set_stack_segment_budget(0);
  r = run_on_small_thread(40000);
  EXPECT_TRUE(r.out_of_segments);
  EXPECT_EQ(r.deepest_level, 0u);
}

TEST_F(StackSegmentsTest, SegmentsAreReusedAndReleased) {
  StackSegment a, b, again;
  ASSERT_TRUE(acquire_stack_segment(0, &a));
  ASSERT_TRUE(acquire_stack_segment(1, &b));
  EXPECT_EQ(a.high - a.low, kStackSegmentBytes - size_t(sysconf(_SC_PAGESIZE)));
  EXPECT_EQ(a.high % 16, 0u);
  EXPECT_NE(a.low, b.low);
  ASSERT_TRUE(acquire_stack_segment(0, &again));
  EXPECT_EQ(again.low, a.low);
  EXPECT_EQ(mapped_stack_segments(), 2u);
  release_stack_segments_above(0);
  EXPECT_EQ(mapped_stack_segments(), 1u);
  // The kept segment is usable memory from low to high.
  std::memset(reinterpret_cast<void*>(a.low), 0x5a, a.high - a.low);
}

TEST_F(StackSegmentsTest, CallReturnsToTheCallersStack) {
  StackSegment seg;
  ASSERT_TRUE(acquire_stack_segment(0, &seg));
  struct Probe {
    uintptr_t seen = 0;
  } probe;
  const uintptr_t before = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  call_on_stack_segment(
      seg,
      [](void* p) {
        static_cast<Probe*>(p)->seen = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
      },
      &probe);
  EXPECT_GE(probe.seen, seg.low);
  EXPECT_LT(probe.seen, seg.high);
  // Back on this thread's stack, in the same frame.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(__builtin_frame_address(0)), before);
}

}  // namespace
}  // namespace framescope_test
