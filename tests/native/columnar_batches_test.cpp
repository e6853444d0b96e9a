// tests/native/columnar_batches_test.cpp: the Parquet export's column batches against key_averages.
#include <array>
#include <map>
#include <stdexcept>
#include <string>

#include "framescope/columnar_batches.h"
#include "framescope/key_averages.h"
#include "framescope/replay_filter.h"
#include "test_support.h"

namespace framescope_test {
namespace {

class ColumnarBatchesTest : public CoreTest {};

// f(0..100) > f(10..60) > g(20..30); a range r(40..50) with inputs in the inner f; g(70..90)
// under the outer f; a mark at 95.
Trace sample() {
  Trace t;
  t.threads.push_back(ThreadInfo{1, 11, 111, 1, "main"});
  const uint32_t f = t.intern(sym("f")), g = t.intern(sym("g")), r = t.intern(sym("r")),
                 m = t.intern(sym("m"));
  EventDetail d;
  d.flops = 96;
  d.seq_nr = 3;
  d.inputs = {RangeInput::of_shape({2, 3}), RangeInput::of_shape({4}, "float"),
              RangeInput::of_int(7), RangeInput::of_string("a\"b"), RangeInput()};
  t.details.push_back(d);
  t.events = {ev(0, 100, -1, f, 0), ev(10, 50, 0, f, 1),
              ev(20, 10, 1, g, 2),  ev(40, 10, 1, r, 2, EventCategory::kUserAnnotation),
              ev(70, 20, 0, g, 1),  ev(95, -1, 0, m, 1, EventCategory::kMark)};
  t.events[3].detail = 0;
  t.start_ns = 0;
  t.stop_ns = 100;
  return t;
}

struct Row {
  int64_t id, parent, start, dur, self;
  std::string name;
  uint8_t kind, recursive;
  int64_t flops;
  std::string args;
};

std::vector<Row> rows_of(const Trace& t, size_t batch_rows, int64_t offset = 0,
                         size_t* batches = nullptr) {
  std::vector<Row> rows;
  ColumnarOptions o;
  o.batch_rows = batch_rows;
  o.offset_ns = offset;
  size_t n = 0;
  write_column_batches(MaterializedSource(t), o, [&](ColumnBatch& b) {
    ++n;
    EXPECT_LE(b.rows, batch_rows);
    for (size_t i = 0; i < b.rows; ++i) {
      const uint32_t s = b.symbols.at(b.name[i]);
      rows.push_back(Row{b.id[i], b.parent[i], b.start_ns[i], b.dur_ns[i], b.self_ns[i],
                         t.symbols.at(s).name, b.kind[i], uint8_t(flag(b.recursive, i)), b.flops[i],
                         b.detail[i] < 0 ? std::string() : b.args.at(size_t(b.detail[i]))});
    }
  });
  if (batches) *batches = n;
  return rows;
}

TEST_F(ColumnarBatchesTest, RowsSumToKeyAveragesInAnyBatchSize) {
  const Trace t = sample();
  const KeyAverages k = compute_key_averages(MaterializedSource(t));
  for (size_t batch_rows : {1, 2, 4, 1000}) {
    size_t batches = 0;
    const std::vector<Row> rows = rows_of(t, batch_rows, 0, &batches);
    ASSERT_EQ(rows.size(), 6u);
    EXPECT_EQ(batches, (rows.size() + batch_rows - 1) / batch_rows);
    std::map<std::string, std::array<int64_t, 3>> sums;  // calls, self, total
    for (const Row& r : rows) {
      if (r.kind == uint8_t(RowKind::kInstant)) continue;
      auto& s = sums[r.name];
      s[0] += 1;
      s[1] += r.self;
      if (!r.recursive) s[2] += r.dur;
    }
    ASSERT_EQ(sums.size(), k.entries.size());
    for (const KeyAverage& e : k.entries) {
      const auto& s = sums[t.symbols[e.symbol].name];
      EXPECT_EQ(s[0], int64_t(e.count)) << t.symbols[e.symbol].name;
      EXPECT_EQ(s[1], e.self_ns) << t.symbols[e.symbol].name;
      EXPECT_EQ(s[2], e.total_ns) << t.symbols[e.symbol].name;
    }
  }
}

TEST_F(ColumnarBatchesTest, TreeKindsOffsetAndArgs) {
  const Trace t = sample();
  std::map<int64_t, Row> by_id;
  for (const Row& r : rows_of(t, 3, 1000)) by_id[r.id] = r;
  ASSERT_EQ(by_id.size(), 6u);
  EXPECT_EQ(by_id[0].parent, -1);
  EXPECT_EQ(by_id[1].parent, 0);
  EXPECT_EQ(by_id[1].recursive, 1);  // f inside f
  EXPECT_EQ(by_id[0].recursive, 0);
  EXPECT_EQ(by_id[2].start, 1020);  // offset applied
  EXPECT_EQ(by_id[3].kind, uint8_t(RowKind::kRange));
  EXPECT_EQ(by_id[3].flops, 96);
  EXPECT_EQ(by_id[3].args,
            "{\"inputs\": [[2, 3], {\"shape\": [4], \"dtype\": \"float\"}, 7, \"a\\\"b\", null], "
            "\"flops\": 96, \"seq_nr\": 3}");
  EXPECT_EQ(by_id[5].kind, uint8_t(RowKind::kInstant));
  EXPECT_EQ(by_id[5].dur, 0);
  EXPECT_EQ(by_id[0].self, 100 - 50 - 20);
  EXPECT_STREQ(kRowKindNames[uint8_t(RowKind::kMemory)], "memory");
}

// A source replayed through host marking (what framescope._host_code.host_view(fold=False)
// gives the batcher).
class MarkedSource final : public TraceSource {
 public:
  MarkedSource(const Trace& t, std::vector<uint8_t> classes) : inner_(t) {
    filter_.symbol_classes = std::make_shared<const std::vector<uint8_t>>(std::move(classes));
    filter_.host_mode = ReplayFilter::HostMode::kMark;
  }
  uint64_t event_count() const override { return inner_.event_count(); }
  int64_t time_base_ns() const override { return inner_.time_base_ns(); }
  void visit(TraceVisitor& v) const override {
    auto marking = make_filtering_visitor(v, filter_);
    inner_.visit(*marking);
  }

 private:
  MaterializedSource inner_;
  ReplayFilter filter_;
};

TEST_F(ColumnarBatchesTest, HostColumnFollowsTheHostClasses) {
  const Trace t = sample();
  // f is host code; g (class 2: the standard library) is host when a host frame calls it; the
  // range r is the program's; m (a mark) has no host flag of its own.
  std::vector<uint8_t> classes(t.symbols.size(), 0);
  classes[t.events[0].symbol] = 1;
  classes[t.events[2].symbol] = 2;
  std::map<int64_t, uint8_t> host;
  ColumnarOptions o;
  write_column_batches(MarkedSource(t, classes), o, [&](ColumnBatch& b) {
    ASSERT_EQ(b.host.size(), (b.rows + 7) / 8);
    for (size_t i = 0; i < b.rows; ++i) host[b.id[i]] = flag(b.host, i);
  });
  ASSERT_EQ(host.size(), 6u);
  EXPECT_EQ(host[0], 1);  // f
  EXPECT_EQ(host[1], 1);  // f
  EXPECT_EQ(host[2], 1);  // g called by f
  EXPECT_EQ(host[3], 0);  // the range r
  EXPECT_EQ(host[4], 1);  // g called by f
  // Without marking every row is the program's.
  write_column_batches(MaterializedSource(t), o, [&](ColumnBatch& b) {
    for (size_t i = 0; i < b.rows; ++i) EXPECT_FALSE(flag(b.host, i));
  });
}

TEST_F(ColumnarBatchesTest, SinkErrorEndsTheReplay) {
  const Trace t = sample();
  ColumnarOptions o;
  o.batch_rows = 1;
  int calls = 0;
  EXPECT_THROW(write_column_batches(MaterializedSource(t), o,
                                    [&](ColumnBatch&) {
                                      ++calls;
                                      throw std::runtime_error("sink");
                                    }),
               std::runtime_error);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace framescope_test
