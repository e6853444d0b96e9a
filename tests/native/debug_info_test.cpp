// tests/native/debug_info_test.cpp: ThreadLocalDebugInfo, ThreadLocalState propagation, ThreadPool.
#include <atomic>
#include <future>
#include <thread>

#include "test_support.h"

namespace framescope_test {
namespace {

struct Tag : DebugInfoBase {
  explicit Tag(int v) : value(v) {}
  int value;
};

int tag_of(DebugInfoKind kind) {
  auto* t = dynamic_cast<Tag*>(ThreadLocalDebugInfo::get(kind));
  return t ? t->value : -1;
}

class DebugInfoTest : public CoreTest {
 protected:
  void SetUp() override { ASSERT_EQ(ThreadLocalDebugInfo::current(), nullptr); }
  void TearDown() override {
    ThreadLocalDebugInfo::force_current(nullptr);
    CoreTest::TearDown();
  }
};

TEST_F(DebugInfoTest, PushPeekGetPop) {
  EXPECT_EQ(ThreadLocalDebugInfo::get(DebugInfoKind::kTestInfo), nullptr);
  EXPECT_EQ(ThreadLocalDebugInfo::peek(DebugInfoKind::kTestInfo), nullptr);
  ThreadLocalDebugInfo::push(DebugInfoKind::kTestInfo, std::make_shared<Tag>(1));
  ThreadLocalDebugInfo::push(DebugInfoKind::kTestInfo2, std::make_shared<Tag>(2));
  ThreadLocalDebugInfo::push(DebugInfoKind::kTestInfo, std::make_shared<Tag>(3));
  EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), 3) << "get returns the newest of a kind";
  EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo2), 2) << "get looks below the top";
  EXPECT_EQ(tag_of(DebugInfoKind::kProducerInfo), -1);
  // peek only looks at the top
  EXPECT_NE(ThreadLocalDebugInfo::peek(DebugInfoKind::kTestInfo), nullptr);
  EXPECT_EQ(ThreadLocalDebugInfo::peek(DebugInfoKind::kTestInfo2), nullptr);
  ASSERT_NE(ThreadLocalDebugInfo::current(), nullptr);
  EXPECT_EQ(ThreadLocalDebugInfo::current()->kind(), DebugInfoKind::kTestInfo);

  auto popped = ThreadLocalDebugInfo::pop(DebugInfoKind::kTestInfo);
  EXPECT_EQ(dynamic_cast<Tag*>(popped.get())->value, 3);
  EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), 1);
  EXPECT_THROW(ThreadLocalDebugInfo::pop(DebugInfoKind::kTestInfo), std::logic_error)
      << "kTestInfo is not on top";
  EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo2), 2) << "a failed pop changes nothing";
  ThreadLocalDebugInfo::pop(DebugInfoKind::kTestInfo2);
  ThreadLocalDebugInfo::pop(DebugInfoKind::kTestInfo);
  EXPECT_EQ(ThreadLocalDebugInfo::current(), nullptr);
  EXPECT_THROW(ThreadLocalDebugInfo::pop(DebugInfoKind::kTestInfo), std::logic_error);
}

TEST_F(DebugInfoTest, NullValueHidesOlderOnes) {
  ThreadLocalDebugInfo::push(DebugInfoKind::kTestInfo, std::make_shared<Tag>(1));
  ThreadLocalDebugInfo::push(DebugInfoKind::kTestInfo, nullptr);
  EXPECT_EQ(ThreadLocalDebugInfo::get(DebugInfoKind::kTestInfo), nullptr);
  ThreadLocalDebugInfo::pop(DebugInfoKind::kTestInfo);
  EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), 1);
}

TEST_F(DebugInfoTest, GuardPushesAndPops) {
  {
    DebugInfoGuard g(DebugInfoKind::kTestInfo, std::make_shared<Tag>(5));
    EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), 5);
    {
      DebugInfoGuard inner(DebugInfoKind::kTestInfo, std::make_shared<Tag>(6));
      EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), 6);
    }
    EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), 5);
  }
  EXPECT_EQ(ThreadLocalDebugInfo::current(), nullptr);
}

TEST_F(DebugInfoTest, WholeListGuardRestoresThePreviousList) {
  ThreadLocalDebugInfo::push(DebugInfoKind::kTestInfo, std::make_shared<Tag>(1));
  auto captured = ThreadLocalDebugInfo::current();
  ThreadLocalDebugInfo::pop(DebugInfoKind::kTestInfo);
  ThreadLocalDebugInfo::push(DebugInfoKind::kTestInfo2, std::make_shared<Tag>(2));
  {
    DebugInfoGuard g(captured);
    EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), 1);
    EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo2), -1);
  }
  EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), -1);
  EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo2), 2);
  ThreadLocalDebugInfo::pop(DebugInfoKind::kTestInfo2);
}

TEST_F(DebugInfoTest, PlainThreadsStartEmpty) {
  DebugInfoGuard g(DebugInfoKind::kTestInfo, std::make_shared<Tag>(9));
  int seen = 0;
  std::thread th([&] { seen = tag_of(DebugInfoKind::kTestInfo); });
  th.join();
  EXPECT_EQ(seen, -1);
}

TEST_F(DebugInfoTest, LaunchCarriesTheState) {
  DebugInfoGuard g(DebugInfoKind::kTestInfo, std::make_shared<Tag>(9));
  int seen = 0;
  bool pushed_ok = false;
  std::thread th = launch_with_thread_local_state([&] {
    seen = tag_of(DebugInfoKind::kTestInfo);
    // The worker can push on top of the carried list without affecting the submitter.
    DebugInfoGuard local(DebugInfoKind::kTestInfo, std::make_shared<Tag>(10));
    pushed_ok = tag_of(DebugInfoKind::kTestInfo) == 10;
  });
  th.join();
  EXPECT_EQ(seen, 9);
  EXPECT_TRUE(pushed_ok);
  EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), 9);
}

TEST_F(DebugInfoTest, StateGuardInstallsAndRestores) {
  ThreadLocalDebugInfo::push(DebugInfoKind::kTestInfo, std::make_shared<Tag>(1));
  ThreadLocalState captured;
  ThreadLocalDebugInfo::pop(DebugInfoKind::kTestInfo);
  ThreadLocalDebugInfo::push(DebugInfoKind::kTestInfo, std::make_shared<Tag>(2));
  {
    ThreadLocalStateGuard guard(captured);
    EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), 1);
  }
  EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), 2);
  ThreadLocalDebugInfo::pop(DebugInfoKind::kTestInfo);
}

TEST_F(DebugInfoTest, WrapWithThreadLocalStateCapturesAtWrapTime) {
  std::function<int(int)> wrapped;
  {
    DebugInfoGuard g(DebugInfoKind::kTestInfo, std::make_shared<Tag>(4));
    wrapped = wrap_with_thread_local_state(
        [](int add) { return tag_of(DebugInfoKind::kTestInfo) + add; });
  }
  EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), -1);
  EXPECT_EQ(wrapped(10), 14);
  EXPECT_EQ(tag_of(DebugInfoKind::kTestInfo), -1) << "the caller's state is restored";
}

TEST_F(DebugInfoTest, ThreadPoolRunsTasksUnderTheSubmittersState) {
  ThreadPool pool(2);
  EXPECT_EQ(pool.size(), 2u);
  std::future<int> with_state;
  {
    DebugInfoGuard g(DebugInfoKind::kTestInfo, std::make_shared<Tag>(21));
    with_state = pool.submit([] { return tag_of(DebugInfoKind::kTestInfo); });
  }
  EXPECT_EQ(with_state.get(), 21);
  // Workers go back to their own (empty) state after a task.
  std::vector<std::future<int>> later;
  for (int i = 0; i < 8; ++i)
    later.push_back(pool.submit([] { return tag_of(DebugInfoKind::kTestInfo); }));
  for (auto& f : later) EXPECT_EQ(f.get(), -1);
}

TEST_F(DebugInfoTest, ThreadPoolPropagatesExceptionsAndResults) {
  ThreadPool pool(1);
  auto ok = pool.submit([] { return std::string("done"); });
  auto bad = pool.submit([]() -> int { throw std::runtime_error("task failed"); });
  EXPECT_EQ(ok.get(), "done");
  EXPECT_THROW(bad.get(), std::runtime_error);
  auto still = pool.submit([] { return 3; });
  EXPECT_EQ(still.get(), 3) << "the worker survives a throwing task";
}

TEST_F(DebugInfoTest, ThreadPoolFinishesQueuedTasksOnDestruction) {
  std::atomic<int> done{0};
  {
    ThreadPool pool(1);
    for (int i = 0; i < 50; ++i) pool.submit([&] { ++done; });
  }
  EXPECT_EQ(done.load(), 50);
  EXPECT_THROW(ThreadPool(0), std::invalid_argument);
}

TEST_F(DebugInfoTest, ThreadLocalStateCarriesCallbacksToo) {
  std::atomic<int> seen{0};
  add_thread_local_callback(RecordFunctionCallback([&](const RecordFunction&) {
    ++seen;
    return nullptr;
  }));
  ThreadLocalState state;
  std::thread th([&] {
    {
      FRAMESCOPE_RANGE("before_guard");
    }
    ThreadLocalStateGuard guard(state);
    FRAMESCOPE_RANGE("under_guard");
  });
  th.join();
  EXPECT_EQ(seen.load(), 1);
}

}  // namespace
}  // namespace framescope_test
