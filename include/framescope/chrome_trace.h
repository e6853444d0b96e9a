// framescope/chrome_trace.h: Chrome Trace Event JSON writer (read by Perfetto, chrome://tracing).
#pragma once

#include <ostream>
#include <string>
#include <string_view>

#include "framescope/trace.h"

namespace framescope {

/// Writes `trace` in the Chrome trace object form, laid out like torch/Kineto exports:
/// "X" slices with `ts`/`dur` in µs relative to `baseTimeNanoseconds` (so ns precision is kept),
/// process/thread name metadata, marks as instants, memory samples as counters. Ranges ended on
/// another thread (async_end) are written as async "b"/"e" pairs (id = event index) so that the
/// "X" slices of every thread nest properly. Thread-safe for
/// distinct streams. Throws std::runtime_error when the stream fails.
void write_chrome_trace(const Trace& trace, std::ostream& out);
/// Same, to a file (created or truncated). Throws std::runtime_error naming the path on failure.
void write_chrome_trace(const Trace& trace, const std::string& path);

/// Appends `text` to `out` as the inside of a JSON string: quotes, backslashes and control
/// characters escaped, invalid UTF-8 replaced by U+FFFD. Never throws except on allocation.
void append_json_escaped(std::string& out, std::string_view text);

}  // namespace framescope
