// bench/native/range_benchmark.cpp: cost of one C++ range (FRAMESCOPE_RANGE) in each consumer
// state.
//
// Cases (ns per range = begin + end):
//   Disabled          nothing consumes ranges: one relaxed load and a branch (target <= 2 ns)
//   Session           recorded by a session into the thread's buffer (target <= 30 ns)
//   Observer          one global no-op observer, no session
//   SessionObserver   both
//   ClockFloor        the floor of any recorded range: two clock reads (now_ticks) and two
//                     16-byte stores into a cached ring, no checks (no target; printed beside)
// The session runs in flight-recorder mode (kKeepNewest) with pre-faulted chunks, so that any
// number of iterations runs at the steady-state cost instead of filling memory.
#include <benchmark/benchmark.h>

#include "framescope/framescope.h"

namespace {

framescope::SessionConfig bench_config() {
  framescope::SessionConfig cfg;
  cfg.on_limit = framescope::LimitPolicy::kKeepNewest;
  cfg.memory_limit_bytes = size_t(32) << 20;
  cfg.prefault_bytes = cfg.memory_limit_bytes;
  cfg.start_stop_marks = false;
  return cfg;
}

framescope::CallbackHandle add_noop_observer() {
  return framescope::add_global_callback(framescope::RecordFunctionCallback(
      [](const framescope::RecordFunction&) -> std::unique_ptr<framescope::ObserverContext> {
        return nullptr;
      },
      [](const framescope::RecordFunction&, framescope::ObserverContext*) {}));
}

// The measured body: one range per iteration, kept from being optimised away.
inline void one_range() {
  FRAMESCOPE_RANGE("bench_range");
  benchmark::ClobberMemory();
}

void BM_RangeDisabled(benchmark::State& state) {
  for (auto _ : state) one_range();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RangeDisabled);

void BM_RangeSession(benchmark::State& state) {
  framescope::enable_profiler(bench_config());
  for (auto _ : state) one_range();
  // (the timer stops when the loop ends)
  framescope::Trace t = framescope::stop_profiler();
  state.counters["kept_events"] = double(t.recorded_events);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RangeSession);

void BM_RangeObserver(benchmark::State& state) {
  framescope::CallbackHandle h = add_noop_observer();
  for (auto _ : state) one_range();
  framescope::remove_callback(h);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RangeObserver);

void BM_RangeSessionObserver(benchmark::State& state) {
  framescope::CallbackHandle h = add_noop_observer();
  framescope::enable_profiler(bench_config());
  for (auto _ : state) one_range();
  framescope::stop_profiler();
  framescope::remove_callback(h);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RangeSessionObserver);

// Two timestamped 16-byte events into a small ring that stays in cache: what a range would cost
// with nothing but its clock reads and stores.
void BM_ClockFloor(benchmark::State& state) {
  static framescope::internal::RawEvent ring[4096];
  size_t pos = 0;
  for (auto _ : state) {
    ring[pos] = {framescope::now_ticks(), 1};
    pos = (pos + 1) & 4095;
    benchmark::ClobberMemory();
    ring[pos] = {framescope::now_ticks(), 3};
    pos = (pos + 1) & 4095;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ClockFloor);

}  // namespace

BENCHMARK_MAIN();
