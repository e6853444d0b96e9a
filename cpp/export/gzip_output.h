// cpp/export/gzip_output.h: a gzip sink that compresses blocks on worker threads.
#pragma once

#include <memory>

#include "framescope/output.h"

namespace framescope::exporters {

/// gzip (RFC 1952, one member) of everything written, into `inner`. The input is cut into
/// 1 MiB blocks deflated at level 1 by `workers` threads (0: on the writing thread), each with
/// the previous block's last 32 KiB as its dictionary, so that the output is one deflate stream
/// of about the ratio of a sequential one. commit() finishes the stream and commits `inner`.
/// Throws OutputError when zlib fails or a thread cannot start. Not thread-safe (one writer).
std::unique_ptr<OutputSink> make_gzip_sink(std::unique_ptr<OutputSink> inner, unsigned workers);

/// Workers used by open_file_output for gzip: one per hardware thread, at most 4.
unsigned default_gzip_workers() noexcept;

}  // namespace framescope::exporters
