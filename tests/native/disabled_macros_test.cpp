// tests/native/disabled_macros_test.cpp: with FRAMESCOPE_DISABLE the range macros compile to
// nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <type_traits>

#include "framescope/framescope.h"

#ifndef FRAMESCOPE_DISABLE
#error "this test must be built with FRAMESCOPE_DISABLE"
#endif
static_assert(FRAMESCOPE_ENABLED == 0, "FRAMESCOPE_DISABLE must switch the macros off");

namespace {

using namespace framescope;

int g_evaluated = 0;
[[maybe_unused]] const char* counted_name() {
  ++g_evaluated;
  return "counted";
}

// A struct whose only member scope holds a range: with the macros disabled the range leaves no
// object behind, so a lambda using it captures nothing and the function stays trivially small.
struct Probe {
  static int run() {
    FRAMESCOPE_RANGE("disabled_range");
    FRAMESCOPE_USER_RANGE("disabled_user_range");
    FRAMESCOPE_RANGE_SCOPE("disabled_scoped_range", RecordScope::kCustom0);
    return 7;
  }
};

TEST(DisabledMacros, ArgumentsAreNotEvaluated) {
  g_evaluated = 0;
  FRAMESCOPE_RANGE(counted_name());
  FRAMESCOPE_USER_RANGE(counted_name());
  FRAMESCOPE_RANGE_SCOPE(counted_name(), RecordScope::kFunction);
  EXPECT_EQ(g_evaluated, 0) << "a disabled macro must expand to nothing, not evaluate its name";
}

TEST(DisabledMacros, MacrosLeaveNoObject) {
  // Used as an expression statement the macro is `void`; nothing with a destructor is created.
  auto lambda = [] {
    FRAMESCOPE_RANGE("in_lambda");
    return 1;
  };
  static_assert(sizeof(lambda) == 1, "a capture-less lambda");
  static_assert(std::is_same_v<decltype((FRAMESCOPE_RANGE("x"))), void>,
                "the disabled macro is a void expression");
  EXPECT_EQ(lambda(), 1);
}

TEST(DisabledMacros, SessionAndObserversSeeNoMacroRanges) {
  std::atomic<int> observed{0};
  CallbackHandle h = add_global_callback(RecordFunctionCallback([&](const RecordFunction&) {
    ++observed;
    return nullptr;
  }));
  enable_profiler();
  EXPECT_EQ(Probe::run(), 7);
  Trace t = stop_profiler();
  EXPECT_EQ(observed.load(), 0);
  for (const TraceEvent& e : t.events) {
    EXPECT_EQ(e.category, EventCategory::kMark) << t.symbols[e.symbol].name;
  }
  EXPECT_EQ(t.events.size(), 2u);  // __start_profile and __stop_profile only

  // The functions stay available: an explicit RecordFunction still records.
  enable_profiler();
  {
    RecordFunction rf("explicit");
    EXPECT_TRUE(rf.is_active());
  }
  Trace t2 = stop_profiler();
  EXPECT_EQ(observed.load(), 1);
  bool found = false;
  for (const TraceEvent& e : t2.events) found |= t2.symbols[e.symbol].name == "explicit";
  EXPECT_TRUE(found);
  remove_callback(h);
}

}  // namespace
