// cpp/export/gzip_output.cpp: gzip compressed in parallel blocks, one gzip member (as pigz does).
//
// Deflate at level 1 runs at a few hundred MB/s, slower than the writers produce trace text, so
// a .json.gz export is bound by it. Blocks of 1 MiB are deflated independently on worker threads
// and joined into one deflate stream: each block is a raw deflate stream ended with a sync flush
// (an empty stored block: byte-aligned, not final), so the blocks concatenate; the last one ends
// with the final block. A block's deflater is primed with the previous block's last 32 KiB (the
// window the inflater will hold there), so matches across the cut are kept and the ratio is
// that of a sequential stream. The CRC-32 is computed on the writing thread, in order. The
// output is one gzip member: readers that stop at the end of the first member (Perfetto's trace
// processor) read all of it.
#include "gzip_output.h"

#include <zlib.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace framescope::exporters {

namespace {

constexpr size_t kBlock = size_t(1) << 20;
constexpr size_t kWindow = size_t(1) << 15;

struct Job {
  std::string input;
  std::string dictionary;  // the previous block's tail
  std::string output;
  bool last = false;
  bool done = false;
  bool failed = false;
};

// Deflates one block; false when zlib fails.
bool deflate_block(Job& job) noexcept {
  try {
    z_stream z{};
    if (deflateInit2(&z, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) return false;
    bool ok = true;
    if (!job.dictionary.empty()) {
      ok = deflateSetDictionary(&z, reinterpret_cast<const Bytef*>(job.dictionary.data()),
                                uInt(job.dictionary.size())) == Z_OK;
    }
    job.output.resize(deflateBound(&z, uLong(job.input.size())) + 64);
    z.next_in = reinterpret_cast<Bytef*>(job.input.data());
    z.avail_in = uInt(job.input.size());
    z.next_out = reinterpret_cast<Bytef*>(job.output.data());
    z.avail_out = uInt(job.output.size());
    if (ok) {
      const int rc = deflate(&z, job.last ? Z_FINISH : Z_SYNC_FLUSH);
      ok = job.last ? rc == Z_STREAM_END : (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0);
    }
    job.output.resize(job.output.size() - z.avail_out);
    deflateEnd(&z);
    return ok;
  } catch (...) {
    return false;
  }
}

class ParallelGzipSink final : public OutputSink {
 public:
  ParallelGzipSink(std::unique_ptr<OutputSink> inner, unsigned workers) : inner_(std::move(inner)) {
    // Header: magic, deflate, no flags, no time, no extra flags, OS unknown... as gzip -1 does
    // (XFL 4: fastest), OS 3 (Unix).
    static const char kHeader[10] = {'\x1f', '\x8b', 8, 0, 0, 0, 0, 0, 4, 3};
    inner_->write(kHeader, sizeof kHeader);
    block_.reserve(kBlock + (kBlock >> 2));
    try {
      for (unsigned i = 0; i < workers; ++i) workers_.emplace_back([this] { work(); });
    } catch (const std::exception& e) {
      stop_workers();
      throw OutputError(std::string("framescope: cannot start a gzip thread: ") + e.what(), 0, "");
    }
  }
  ~ParallelGzipSink() override { stop_workers(); }

  void write(const char* data, size_t size) override {
    while (size > 0) {
      const size_t n = std::min(size, kBlock - std::min(kBlock, block_.size()));
      block_.append(data, n);
      data += n;
      size -= n;
      if (block_.size() >= kBlock) submit(false);
    }
  }

  void commit() override {
    submit(true);
    while (!in_order_.empty()) write_oldest();
    char trailer[8];
    const uint32_t crc = uint32_t(crc_), size = uint32_t(total_);
    for (int i = 0; i < 4; ++i) {
      trailer[i] = char(crc >> (8 * i));
      trailer[4 + i] = char(size >> (8 * i));
    }
    inner_->write(trailer, sizeof trailer);
    inner_->commit();
  }

 private:
  void submit(bool last) {
    auto job = std::make_shared<Job>();
    job->input.swap(block_);
    block_.reserve(kBlock + (kBlock >> 2));
    job->dictionary = tail_;
    job->last = last;
    crc_ = crc32_z(crc_, reinterpret_cast<const Bytef*>(job->input.data()), job->input.size());
    total_ += job->input.size();
    if (job->input.size() >= kWindow) {
      tail_.assign(job->input, job->input.size() - kWindow, kWindow);
    } else {
      tail_.append(job->input);
      if (tail_.size() > kWindow) tail_.erase(0, tail_.size() - kWindow);
    }
    in_order_.push_back(job);
    if (workers_.empty()) {
      job->failed = !deflate_block(*job);
      job->done = true;
    } else {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(job);
      }
      work_cv_.notify_one();
    }
    // Bounded memory: at most two blocks per worker in flight.
    while (in_order_.size() > 2 * std::max<size_t>(1, workers_.size())) write_oldest();
  }

  // Waits for the oldest block and hands its output to the inner sink.
  void write_oldest() {
    std::shared_ptr<Job> job = in_order_.front();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_cv_.wait(lock, [&] { return job->done; });
    }
    in_order_.pop_front();
    if (job->failed) throw OutputError("framescope: zlib failed", 0, "");
    inner_->write(job->output.data(), job->output.size());
  }

  void work() noexcept {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      const bool ok = deflate_block(*job);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        job->failed = !ok;
        job->done = true;
      }
      done_cv_.notify_all();
    }
  }

  void stop_workers() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      queue_.clear();
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  std::unique_ptr<OutputSink> inner_;
  std::string block_;
  std::string tail_;  // the last 32 KiB of input so far
  uLong crc_ = crc32(0, nullptr, 0);
  uint64_t total_ = 0;
  std::deque<std::shared_ptr<Job>> in_order_;  // submitted, not yet written (writer only)

  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<std::shared_ptr<Job>> queue_;  // not yet taken by a worker
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<OutputSink> make_gzip_sink(std::unique_ptr<OutputSink> inner, unsigned workers) {
  return std::make_unique<ParallelGzipSink>(std::move(inner), workers);
}

unsigned default_gzip_workers() noexcept {
  const unsigned n = std::thread::hardware_concurrency();
  return std::min(4u, std::max(1u, n));
}

}  // namespace framescope::exporters
