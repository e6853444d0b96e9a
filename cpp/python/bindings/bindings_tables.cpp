// cpp/python/bindings/bindings_tables.cpp: column batches of a trace handed to Python, zero-copy.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>
#include <mutex>

#include "bindings/trace_handle.h"
#include "framescope/columnar_batches.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace framescope::py {

namespace {

// A column as a read-only memoryview over the batch's own vector: the
// batch lives until the last column referring to it is gone (`owner`).
template <class T>
nb::object column(const std::vector<T>& v, nb::handle owner) {
  size_t shape[1] = {v.size()};
  return nb::cast(nb::ndarray<nb::memview, nb::ro, T, nb::ndim<1>>(v.data(), 1, shape, owner));
}

// Names of the symbols batches use, as str objects made once per symbol (batches share them).
class SymbolTexts {
 public:
  explicit SymbolTexts(const std::vector<Symbol>& symbols) : symbols_(symbols) {
    names_.resize(symbols.size() + 1);
    files_.resize(symbols.size() + 1);
    functions_.resize(symbols.size() + 1);
  }
  nb::tuple of(const std::vector<uint32_t>& used) {
    nb::list names, files, lines, functions;
    for (uint32_t s : used) {
      if (!names_[s].is_valid()) {
        if (s < symbols_.size()) {
          names_[s] = py_str(symbols_[s].name);
          files_[s] = py_str(symbols_[s].file);
          functions_[s] = py_str(symbols_[s].function);
        } else {
          names_[s] = files_[s] = functions_[s] = nb::str("[memory]");
          files_[s] = nb::str("");
        }
      }
      names.append(names_[s]);
      files.append(files_[s]);
      lines.append(s < symbols_.size() ? symbols_[s].line : 0);
      functions.append(functions_[s]);
    }
    return nb::make_tuple(names, files, lines, functions);
  }

 private:
  const std::vector<Symbol>& symbols_;
  std::vector<nb::object> names_, files_, functions_;
};

// A batch Python is done with, kept for the replay to refill (at most one: the sink writes a
// batch before the next is filled).
struct BatchPool {
  std::mutex mutex;
  std::unique_ptr<ColumnBatch> free;
};

struct PooledBatch {
  ColumnBatch batch;
  std::weak_ptr<BatchPool> pool;
};

}  // namespace

void bind_tables(nb::module_& m) {
  m.def(
      "_column_batches",
      [](const PyTrace& t, nb::callable sink, size_t batch_rows, int64_t offset_ns) {
        if (batch_rows == 0) throw nb::value_error("batch_rows must be > 0");
        auto stored = t.state->current();
        ColumnarOptions options;
        options.batch_rows = batch_rows;
        options.offset_ns = offset_ns;
        SymbolTexts texts(stored->symbols());
        auto pool = std::make_shared<BatchPool>();
        // The replay runs without the GIL; each full batch takes it to be handed over. The
        // batch's vectors move to the heap, owned by a capsule the column arrays keep alive;
        // when the last of them is gone the batch goes back to `pool`, and the replay refills
        // it (no fresh memory per batch) unless the sink still holds it.
        nb::gil_scoped_release release;
        write_column_batches(*stored, options, [&](ColumnBatch& b) {
          nb::gil_scoped_acquire acquire;
          auto* pooled = new PooledBatch{std::move(b), pool};
          ColumnBatch* held = &pooled->batch;
          nb::capsule owner(pooled, [](void* p) noexcept {
            auto* done = static_cast<PooledBatch*>(p);
            if (auto back = done->pool.lock()) {
              std::lock_guard<std::mutex> lock(back->mutex);
              if (!back->free) {
                back->free = std::make_unique<ColumnBatch>(std::move(done->batch));
              }
            }
            delete done;
          });
          nb::dict d;
          d["rows"] = held->rows;
          d["id"] = column(held->id, owner);
          d["parent_id"] = column(held->parent, owner);
          d["start_ns"] = column(held->start_ns, owner);
          d["dur_ns"] = column(held->dur_ns, owner);
          d["self_ns"] = column(held->self_ns, owner);
          d["cpu_ns"] = column(held->cpu_ns, owner);
          d["cpu_self_ns"] = column(held->cpu_self_ns, owner);
          d["alloc_bytes"] = column(held->alloc_bytes, owner);
          d["alloc_self_bytes"] = column(held->alloc_self_bytes, owner);
          d["flops"] = column(held->flops, owner);
          d["thread"] = column(held->thread, owner);
          d["name"] = column(held->name, owner);
          d["depth"] = column(held->depth, owner);
          d["detail"] = column(held->detail, owner);
          d["kind"] = column(held->kind, owner);
          d["is_async"] = column(held->is_async, owner);
          d["recursive"] = column(held->recursive, owner);
          d["host"] = column(held->host, owner);
          d["symbols"] = texts.of(held->symbols);
          nb::list args;
          for (const std::string& a : held->args) args.append(py_str(a));
          d["args"] = args;
          d["any_cpu_known"] = held->any_cpu_known;
          d["any_cpu_unknown"] = held->any_cpu_unknown;
          sink(d);  // a Python exception propagates as nb::python_error, ending the replay
          d.clear();
          owner.reset();
          std::lock_guard<std::mutex> lock(pool->mutex);
          if (pool->free) {
            b = std::move(*pool->free);
            pool->free.reset();
          }
        });
      },
      "trace"_a, "sink"_a, "batch_rows"_a = size_t(1) << 20, "offset_ns"_a = 0,
      "Replays the trace into column batches of batch_rows rows, calling sink(dict) per batch.");
  nb::list kinds;
  for (const char* k : kRowKindNames) kinds.append(nb::str(k));
  m.attr("_ROW_KINDS") = kinds;
}

}  // namespace framescope::py
