// tests/native/clock_test.cpp: tick reads and the tick -> CLOCK_MONOTONIC ns calibration.
#include "framescope/clock.h"

#include <gtest/gtest.h>

#include <thread>

namespace {

using framescope::ClockConverter;
using framescope::monotonic_ns;
using framescope::now_ticks;

TEST(Clock, MonotonicNsNeverGoesBack) {
  uint64_t prev = monotonic_ns();
  for (int i = 0; i < 10000; ++i) {
    uint64_t now = monotonic_ns();
    ASSERT_GE(now, prev);
    prev = now;
  }
}

TEST(Clock, TicksNeverGoBackOnOneThread) {
  uint64_t prev = now_ticks();
  for (int i = 0; i < 10000; ++i) {
    uint64_t now = now_ticks();
    ASSERT_GE(now, prev);
    prev = now;
  }
}

TEST(Clock, TscUseFollowsReliability) {
  // The session clock only uses the TSC when it is reliable (or on non-x86 never).
  if (!framescope::tsc_is_reliable()) {
    EXPECT_FALSE(framescope::internal::g_use_tsc);
  }
  EXPECT_EQ(framescope::tsc_is_reliable(), framescope::tsc_is_reliable());
}

TEST(Clock, ConverterMapsTicksOntoMonotonicNs) {
  ClockConverter c = ClockConverter::start();
  // Ticks taken between two monotonic reads must convert to a time between them (give or take
  // the calibration error, bounded generously: this is a mapping check, not a timing check).
  uint64_t before_ns = monotonic_ns();
  uint64_t ticks = now_ticks();
  uint64_t after_ns = monotonic_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  c.finish();
  EXPECT_GT(c.ticks_per_ns(), 0.0);
  if (!framescope::internal::g_use_tsc) {
    EXPECT_DOUBLE_EQ(c.ticks_per_ns(), 1.0);
  }
  const int64_t slack = 1000000;  // 1 ms
  int64_t ns = c.to_ns(ticks);
  EXPECT_GE(ns, int64_t(before_ns) - slack);
  EXPECT_LE(ns, int64_t(after_ns) + slack);
}

TEST(Clock, ConversionIsMonotonicInTicks) {
  ClockConverter c = ClockConverter::start();
  c.finish();
  uint64_t t0 = now_ticks();
  int64_t prev = c.to_ns(t0);
  for (uint64_t d = 1; d < 1000000000ull; d *= 3) {
    int64_t ns = c.to_ns(t0 + d);
    EXPECT_GE(ns, prev);
    prev = ns;
  }
  // Ticks before the calibration start convert to earlier times, not to wrapped-around values.
  EXPECT_LT(c.to_ns(t0 - 1000000), c.to_ns(t0));
}

TEST(Clock, FinishIsIdempotent) {
  ClockConverter c = ClockConverter::start();
  c.finish();
  double rate = c.ticks_per_ns();
  uint64_t t = now_ticks();
  int64_t ns = c.to_ns(t);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  c.finish();
  EXPECT_EQ(c.ticks_per_ns(), rate);
  EXPECT_EQ(c.to_ns(t), ns);
}

TEST(Clock, ShortSessionsStillGetAUsableRate) {
  // finish() right after start() must extend the baseline rather than divide by ~0.
  for (int i = 0; i < 3; ++i) {
    ClockConverter c = ClockConverter::start();
    c.finish();
    EXPECT_GT(c.ticks_per_ns(), 0.0);
    EXPECT_LT(c.ticks_per_ns(), 100.0);  // no CPU runs its TSC at 100 GHz
  }
}

}  // namespace
