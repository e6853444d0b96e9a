// tests/native/observers_test.cpp: RecordFunction observers: pairing, mid-range changes, sampling,
// filters.
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>

#include "framescope/internal/thread_buffer.h"
#include "test_support.h"

namespace framescope_test {
namespace {

class ObserversTest : public CoreTest {};

/// A context that remembers which start produced it.
struct TagContext : ObserverContext {
  explicit TagContext(std::string n) : name(std::move(n)) {}
  std::string name;
};

/// Counts starts and ends of one observer and checks that every end gets its start's context.
struct Counter {
  std::atomic<int> starts{0};
  std::atomic<int> ends{0};
  std::atomic<int> mismatched{0};
  std::mutex mutex;
  std::vector<std::string> started_names;
  std::vector<std::string> ended_names;

  RecordFunctionCallback callback() {
    return RecordFunctionCallback(
        [this](const RecordFunction& rf) -> std::unique_ptr<ObserverContext> {
          starts.fetch_add(1);
          std::lock_guard<std::mutex> lock(mutex);
          started_names.emplace_back(rf.name());
          return std::make_unique<TagContext>(std::string(rf.name()));
        },
        [this](const RecordFunction& rf, ObserverContext* ctx) {
          ends.fetch_add(1);
          auto* tag = dynamic_cast<TagContext*>(ctx);
          if (!tag || tag->name != rf.name()) mismatched.fetch_add(1);
          std::lock_guard<std::mutex> lock(mutex);
          ended_names.emplace_back(rf.name());
        });
  }
};

TEST_F(ObserversTest, GlobalCallbackSeesStartAndEndWithItsContext) {
  Counter c;
  CallbackHandle h = add_global_callback(c.callback());
  EXPECT_NE(h, 0u);
  EXPECT_GE(internal::g_range_consumers.load(), 1);
  {
    FRAMESCOPE_RANGE("a");
    EXPECT_EQ(c.starts.load(), 1);
    EXPECT_EQ(c.ends.load(), 0);
    {
      FRAMESCOPE_USER_RANGE("b");
    }
    EXPECT_EQ(c.ends.load(), 1);
  }
  EXPECT_EQ(c.starts.load(), 2);
  EXPECT_EQ(c.ends.load(), 2);
  EXPECT_EQ(c.mismatched.load(), 0);
  EXPECT_EQ(c.started_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.ended_names, (std::vector<std::string>{"b", "a"}));
  EXPECT_TRUE(remove_callback(h));
  EXPECT_EQ(internal::g_range_consumers.load(), 0);
}

TEST_F(ObserversTest, ManyObserversRunInOrderAndStayPaired) {
  // More observers than a range keeps inline: order and pairing hold for all of them.
  std::vector<std::string> calls;
  std::vector<CallbackHandle> handles;
  for (int i = 0; i < 7; ++i) {
    handles.push_back(add_global_callback(RecordFunctionCallback(
        [&calls, i](const RecordFunction&) -> std::unique_ptr<ObserverContext> {
          calls.push_back("start" + std::to_string(i));
          return std::make_unique<TagContext>(std::to_string(i));
        },
        [&calls, i](const RecordFunction&, ObserverContext* ctx) {
          auto* tag = dynamic_cast<TagContext*>(ctx);
          calls.push_back("end" + std::to_string(i) +
                          (tag && tag->name == std::to_string(i) ? "" : "!"));
        })));
  }
  {
    FRAMESCOPE_RANGE("seven");
    remove_callback(handles[5]);  // removed mid-range: still ends
  }
  std::vector<std::string> expected;
  for (int i = 0; i < 7; ++i) expected.push_back("start" + std::to_string(i));
  for (int i = 0; i < 7; ++i) expected.push_back("end" + std::to_string(i));
  EXPECT_EQ(calls, expected);
}

TEST_F(ObserversTest, ObserverSeesScopeThreadAndSeqNr) {
  RecordScope scope = RecordScope::kFunction;
  uint64_t tid = 0;
  int64_t seq = 0;
  add_global_callback(RecordFunctionCallback([&](const RecordFunction& rf) {
    scope = rf.scope();
    tid = rf.thread_id();
    seq = rf.seq_nr();
    return nullptr;
  }));
  {
    RecordFunction rf(RecordScope::kUserScope);
    rf.before("x", /*seq_nr=*/77);
  }
  EXPECT_EQ(scope, RecordScope::kUserScope);
  EXPECT_EQ(tid, current_thread_id());
  EXPECT_EQ(seq, 77);
}

TEST_F(ObserversTest, GlobalCallbackSeesOtherThreads) {
  Counter c;
  add_global_callback(c.callback());
  std::thread th([] { FRAMESCOPE_RANGE("elsewhere"); });
  th.join();
  EXPECT_EQ(c.starts.load(), 1);
  EXPECT_EQ(c.ends.load(), 1);
}

TEST_F(ObserversTest, ThreadLocalCallbackStaysOnItsThreadUnlessPropagated) {
  Counter c;
  CallbackHandle h = add_thread_local_callback(c.callback());
  std::thread plain([] { FRAMESCOPE_RANGE("plain_thread"); });
  plain.join();
  EXPECT_EQ(c.starts.load(), 0);
  {
    FRAMESCOPE_RANGE("own_thread");
  }
  EXPECT_EQ(c.starts.load(), 1);
  std::thread carried = launch_with_thread_local_state([] { FRAMESCOPE_RANGE("carried"); });
  carried.join();
  EXPECT_EQ(c.starts.load(), 2);
  {
    ThreadPool pool(2);
    pool.submit([] { FRAMESCOPE_RANGE("pool_task"); }).get();
  }
  EXPECT_EQ(c.starts.load(), 3);
  EXPECT_EQ(c.ends.load(), 3);
  EXPECT_EQ(c.mismatched.load(), 0);
  EXPECT_TRUE(remove_callback(h));
  {
    FRAMESCOPE_RANGE("after_remove");
  }
  EXPECT_EQ(c.starts.load(), 3);
  EXPECT_EQ(internal::g_range_consumers.load(), 0);
}

TEST_F(ObserversTest, RemovedMidRangeStillGetsTheEnd) {
  Counter c;
  CallbackHandle h = add_global_callback(c.callback());
  {
    FRAMESCOPE_RANGE("spanning");
    EXPECT_TRUE(remove_callback(h));
    EXPECT_FALSE(remove_callback(h)) << "second removal of the same handle";
    FRAMESCOPE_RANGE("after_removal");
  }
  EXPECT_EQ(c.starts.load(), 1);
  EXPECT_EQ(c.ends.load(), 1);
  EXPECT_EQ(c.mismatched.load(), 0);
  EXPECT_EQ(c.ended_names, std::vector<std::string>{"spanning"});
}

TEST_F(ObserversTest, ThreadLocalRemovedMidRangeStillGetsTheEnd) {
  Counter c;
  CallbackHandle h = add_thread_local_callback(c.callback());
  {
    FRAMESCOPE_RANGE("spanning");
    EXPECT_TRUE(remove_callback(h));
  }
  EXPECT_EQ(c.starts.load(), 1);
  EXPECT_EQ(c.ends.load(), 1);
  EXPECT_EQ(c.mismatched.load(), 0);
}

TEST_F(ObserversTest, AddedMidRangeDoesNotSeeTheEnd) {
  Counter c;
  {
    Counter other;  // keeps ranges active so that the range below starts observed by someone
    CallbackHandle keep = add_global_callback(other.callback());
    FRAMESCOPE_RANGE("started_before_add");
    CallbackHandle h = add_global_callback(c.callback());
    {
      FRAMESCOPE_RANGE("started_after_add");
    }
    EXPECT_TRUE(remove_callback(h));
    EXPECT_TRUE(remove_callback(keep));
  }
  EXPECT_EQ(c.starts.load(), 1);
  EXPECT_EQ(c.ends.load(), 1);
  EXPECT_EQ(c.ended_names, std::vector<std::string>{"started_after_add"});
}

TEST_F(ObserversTest, AddedMidRangeWithoutOtherConsumers) {
  // The range starts inert (nothing consumes ranges); adding a callback later must not give it
  // an end call.
  Counter c;
  CallbackHandle h = 0;
  {
    FRAMESCOPE_RANGE("inert");
    h = add_global_callback(c.callback());
  }
  EXPECT_EQ(c.starts.load(), 0);
  EXPECT_EQ(c.ends.load(), 0);
  EXPECT_TRUE(remove_callback(h));
}

TEST_F(ObserversTest, DisableAndReenableMidRangeKeepPairing) {
  Counter c;
  CallbackHandle h = add_global_callback(c.callback());
  {
    FRAMESCOPE_RANGE("disabled_mid_range");
    EXPECT_TRUE(disable_callback(h));
    {
      FRAMESCOPE_RANGE("while_disabled");  // not observed
      EXPECT_TRUE(reenable_callback(h));
      // started while disabled: re-enabling must not produce an unpaired end
    }
    {
      FRAMESCOPE_RANGE("after_reenable");
    }
  }
  EXPECT_EQ(c.starts.load(), 2);
  EXPECT_EQ(c.ends.load(), 2);
  EXPECT_EQ(c.mismatched.load(), 0);
  EXPECT_EQ(c.started_names, (std::vector<std::string>{"disabled_mid_range", "after_reenable"}));
  EXPECT_EQ(c.ended_names, (std::vector<std::string>{"after_reenable", "disabled_mid_range"}));
  EXPECT_FALSE(disable_callback(123456789));
  EXPECT_FALSE(reenable_callback(123456789));
  EXPECT_FALSE(remove_callback(123456789));
}

TEST_F(ObserversTest, DisableThreadLocalCallback) {
  Counter c;
  CallbackHandle h = add_thread_local_callback(c.callback());
  EXPECT_TRUE(disable_callback(h));
  {
    FRAMESCOPE_RANGE("x");
  }
  EXPECT_EQ(c.starts.load(), 0);
  EXPECT_TRUE(reenable_callback(h));
  {
    FRAMESCOPE_RANGE("y");
  }
  EXPECT_EQ(c.starts.load(), 1);
  EXPECT_EQ(c.ends.load(), 1);
}

TEST_F(ObserversTest, ObserverEndRunsOnTheEndingThread) {
  std::atomic<uint64_t> end_thread{0};
  add_global_callback(RecordFunctionCallback(
      [](const RecordFunction&) { return std::make_unique<TagContext>("async"); },
      [&](const RecordFunction& rf, ObserverContext* ctx) {
        auto* tag = dynamic_cast<TagContext*>(ctx);
        EXPECT_TRUE(tag && tag->name == "async");
        EXPECT_EQ(rf.name(), "async");
        end_thread = current_thread_id();
      }));
  auto rf = std::make_unique<RecordFunction>();
  rf->before("async");
  uint64_t ender_id = 0;
  std::thread th([&] {
    ender_id = current_thread_id();
    rf->end();
  });
  th.join();
  EXPECT_EQ(end_thread.load(), ender_id);
  EXPECT_NE(ender_id, current_thread_id());
}

// ---- sampling --------------------------------------------------------------------------------

std::vector<int> sampled_indices(uint32_t seed, double p, int n) {
  std::vector<int> hits;
  int current = -1;
  CallbackHandle h = add_global_callback(RecordFunctionCallback([&](const RecordFunction&) {
                                           hits.push_back(current);
                                           return nullptr;
                                         }).sampling_prob(p));
  set_record_function_seed_for_testing(seed);
  for (current = 0; current < n; ++current) {
    FRAMESCOPE_RANGE("sampled");
  }
  remove_callback(h);
  return hits;
}

TEST_F(ObserversTest, SamplingMatchesItsProbability) {
  constexpr int kRanges = 100000;
  std::vector<int> hits = sampled_indices(1234, 0.1, kRanges);
  // Expected 10,000; the standard deviation is ~95, so +-600 is > 6 sigma.
  EXPECT_GT(hits.size(), 9400u);
  EXPECT_LT(hits.size(), 10600u);
  // A countdown, not "every 10th": gaps vary.
  std::set<int> gaps;
  for (size_t i = 1; i < hits.size(); ++i) gaps.insert(hits[i] - hits[i - 1]);
  EXPECT_GT(gaps.size(), 10u);
  for (int g : gaps) EXPECT_GE(g, 1);
}

TEST_F(ObserversTest, SamplingIsDeterministicUnderATestSeed) {
  std::vector<int> a = sampled_indices(42, 0.05, 20000);
  std::vector<int> b = sampled_indices(42, 0.05, 20000);
  std::vector<int> c = sampled_indices(43, 0.05, 20000);
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST_F(ObserversTest, SampledRangesStillPairStartAndEnd) {
  Counter c;
  CallbackHandle h = add_global_callback(c.callback().sampling_prob(0.3));
  set_record_function_seed_for_testing(7);
  for (int i = 0; i < 5000; ++i) {
    FRAMESCOPE_RANGE("outer");
    FRAMESCOPE_RANGE("inner");
  }
  EXPECT_GT(c.starts.load(), 0);
  EXPECT_LT(c.starts.load(), 10000);
  EXPECT_EQ(c.starts.load(), c.ends.load());
  EXPECT_EQ(c.mismatched.load(), 0);
  remove_callback(h);
}

TEST_F(ObserversTest, UnsampledCallbackSeesEverythingBesideASampledOne) {
  std::atomic<int> all{0}, some{0};
  add_global_callback(RecordFunctionCallback([&](const RecordFunction&) {
    ++all;
    return nullptr;
  }));
  add_global_callback(RecordFunctionCallback([&](const RecordFunction&) {
                        ++some;
                        return nullptr;
                      }).sampling_prob(0.01));
  set_record_function_seed_for_testing(3);
  for (int i = 0; i < 10000; ++i) {
    FRAMESCOPE_RANGE("r");
  }
  EXPECT_EQ(all.load(), 10000);
  EXPECT_GT(some.load(), 30);
  EXPECT_LT(some.load(), 300);
}

TEST_F(ObserversTest, InvalidSamplingProbabilityThrows) {
  RecordFunctionCallback cb([](const RecordFunction&) { return nullptr; });
  EXPECT_THROW(cb.sampling_prob(0.0), std::invalid_argument);
  EXPECT_THROW(cb.sampling_prob(-0.5), std::invalid_argument);
  EXPECT_THROW(cb.sampling_prob(1.5), std::invalid_argument);
  EXPECT_THROW(cb.sampling_prob(std::nan("")), std::invalid_argument);
  EXPECT_NO_THROW(cb.sampling_prob(1.0));
  EXPECT_NO_THROW(cb.sampling_prob(1e-9));
}

// ---- filters, ids, inputs --------------------------------------------------------------------

TEST_F(ObserversTest, ScopeFilterSelectsScopes) {
  Counter user_only, fn_only;
  add_global_callback(user_only.callback().scopes({RecordScope::kUserScope}));
  add_global_callback(fn_only.callback().scopes({RecordScope::kFunction}));
  {
    FRAMESCOPE_RANGE("fn");
    FRAMESCOPE_USER_RANGE("user");
    FRAMESCOPE_RANGE_SCOPE("custom", RecordScope::kCustom1);
  }
  EXPECT_EQ(user_only.started_names, std::vector<std::string>{"user"});
  EXPECT_EQ(fn_only.started_names, std::vector<std::string>{"fn"});
  EXPECT_EQ(user_only.ends.load(), 1);
  EXPECT_EQ(fn_only.ends.load(), 1);
}

TEST_F(ObserversTest, FilteredOutScopeLeavesRangeInertWithoutSession) {
  add_global_callback(RecordFunctionCallback([](const RecordFunction&) {
                        return nullptr;
                      }).scopes({RecordScope::kUserScope}));
  RecordFunction rf("fn_scope");
  EXPECT_FALSE(rf.is_active());
}

TEST_F(ObserversTest, HandlesOnlyWhenAnObserverNeedsIds) {
  std::vector<uint64_t> handles;
  CallbackHandle h = add_global_callback(RecordFunctionCallback([&](const RecordFunction& rf) {
    handles.push_back(rf.handle());
    return nullptr;
  }));
  {
    FRAMESCOPE_RANGE("no_ids");
  }
  ASSERT_EQ(handles.size(), 1u);
  EXPECT_EQ(handles[0], 0u);
  remove_callback(h);
  handles.clear();
  add_global_callback(RecordFunctionCallback([&](const RecordFunction& rf) {
                        handles.push_back(rf.handle());
                        return nullptr;
                      }).needs_ids());
  for (int i = 0; i < 100; ++i) {
    FRAMESCOPE_RANGE("ids");
  }
  ASSERT_EQ(handles.size(), 100u);
  std::set<uint64_t> unique(handles.begin(), handles.end());
  EXPECT_EQ(unique.size(), 100u);
  EXPECT_EQ(unique.count(0), 0u);
}

TEST_F(ObserversTest, HandlesReachTheSessionTrace) {
  uint64_t seen = 0;
  add_global_callback(RecordFunctionCallback([&](const RecordFunction& rf) {
                        seen = rf.handle();
                        return nullptr;
                      }).needs_ids());
  Trace t = record([] { FRAMESCOPE_RANGE("with_id"); });
  const TraceEvent& e = only_event(t, "with_id");
  ASSERT_NE(e.detail, UINT32_MAX);
  EXPECT_NE(seen, 0u);
  EXPECT_EQ(t.details[e.detail].handle, seen);
}

TEST_F(ObserversTest, InputsOnlyWhenAnObserverNeedsThem) {
  std::vector<RangeInput> got;
  bool needs = true;
  CallbackHandle h = add_global_callback(RecordFunctionCallback([&](const RecordFunction& rf) {
    got = rf.inputs();
    return nullptr;
  }));
  {
    RecordFunction rf;
    needs = rf.needs_inputs();
    rf.before("op", {RangeInput::of_int(1)});
  }
  EXPECT_FALSE(needs);
  EXPECT_TRUE(got.empty());
  remove_callback(h);

  add_global_callback(RecordFunctionCallback([&](const RecordFunction& rf) {
                        got = rf.inputs();
                        return nullptr;
                      }).needs_inputs());
  {
    RecordFunction rf;
    needs = rf.needs_inputs();
    rf.before("op", {RangeInput::of_shape({4, 5}, "f32"), RangeInput::of_string("s"),
                     RangeInput::of_double(2.5)});
  }
  EXPECT_TRUE(needs);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].shape, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(got[1].text, "s");
  EXPECT_DOUBLE_EQ(got[2].double_value, 2.5);
}

TEST_F(ObserversTest, ThrowingCallbacksAreContained) {
  std::atomic<int> ends{0};
  add_global_callback(RecordFunctionCallback(
      [](const RecordFunction&) -> std::unique_ptr<ObserverContext> {
        throw std::runtime_error("start boom");
      },
      [&](const RecordFunction&, ObserverContext* ctx) {
        EXPECT_EQ(ctx, nullptr);
        ++ends;
        throw std::runtime_error("end boom");
      }));
  Counter c;
  add_global_callback(c.callback());
  for (int i = 0; i < 3; ++i) {
    FRAMESCOPE_RANGE("boom");
  }
  EXPECT_EQ(ends.load(), 3);
  EXPECT_EQ(c.ends.load(), 3) << "an observer after a throwing one still runs";
}

TEST_F(ObserversTest, ObserversAndSessionTogether) {
  Counter c;
  add_global_callback(c.callback());
  Trace t = record([] {
    FRAMESCOPE_RANGE("both");
    RecordFunction dynamic;
    dynamic.before(std::string_view("dynamic_both"));
  });
  EXPECT_EQ(find_events(t, "both").size(), 1u);
  EXPECT_EQ(find_events(t, "dynamic_both").size(), 1u);
  EXPECT_EQ(c.starts.load(), 2);
  EXPECT_EQ(c.ends.load(), 2);
  expect_well_formed(t);
}

TEST_F(ObserversTest, ClearCallbacksRemovesEverything) {
  Counter g, l;
  add_global_callback(g.callback());
  add_thread_local_callback(l.callback());
  clear_callbacks();
  EXPECT_EQ(internal::g_range_consumers.load(), 0);
  {
    FRAMESCOPE_RANGE("cleared");
  }
  EXPECT_EQ(g.starts.load() + l.starts.load(), 0);
}

TEST_F(ObserversTest, CallbacksChangeWhileOtherThreadsRecord) {
  // Observers added, disabled, re-enabled and removed while other threads run ranges: every
  // start gets exactly one end with its own context. (Also a TSan target.)
  Counter c;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        FRAMESCOPE_RANGE("busy_outer");
        FRAMESCOPE_USER_RANGE("busy_inner");
      }
    });
  }
  for (int round = 0; round < 200; ++round) {
    CallbackHandle h = add_global_callback(c.callback());
    disable_callback(h);
    reenable_callback(h);
    std::this_thread::yield();
    remove_callback(h);
  }
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.starts.load(), c.ends.load());
  EXPECT_EQ(c.mismatched.load(), 0);
  EXPECT_EQ(internal::g_range_consumers.load(), 0);
}

}  // namespace
}  // namespace framescope_test
