// framescope/writers.h: trace writers, one per format, each a visitor over one replay.
#pragma once

#include <string>
#include <string_view>

#include "framescope/output.h"
#include "framescope/trace_visitor.h"

namespace framescope {

/// Output formats. Every writer streams into an OutputSink (no whole-file string), reads the
/// source through one replay and may run concurrently with other readers of the same source.
/// All throw OutputError when the sink fails; names that are not valid UTF-8 are written with
/// U+FFFD in their place.
enum class ExportFormat {
  kChromeJson,  ///< Chrome Trace Event JSON (Kineto layout; Perfetto UI, chrome://tracing)
  kPerfetto,    ///< Perfetto protobuf (.pftrace): TrackEvent slices with interned names
  kPstats,      ///< cProfile's marshalled stats dict (pstats.Stats, snakeviz, gprof2dot)
  kSpeedscope,  ///< speedscope's file format: an evented profile per thread
  kCollapsed,   ///< collapsed stacks "thread;a;b;c <self µs>" (flamegraph.pl, inferno)
};

/// Chrome JSON: "X" slices with ts/dur in µs (3 decimals) relative to baseTimeNanoseconds,
/// marks as "i", ranges ended on another thread as "b"/"e", memory samples as "[memory]"
/// instants plus a "Memory" counter, process/thread name metadata.
void write_chrome_json(const TraceSource& source, OutputSink& out);
/// The same for torch.profiler's readers (torch-tb-profiler, HTA): `extra_members` (JSON object
/// members, each followed by a comma: `"key":value,`) written first in the top-level object
/// (traceName, distributedInfo, add_metadata's keys), and the Python heap's samples also as
/// "[memory]" instants (the Memory view reads those; the plain export writes only a counter,
/// as a sample may come with every call). In both, Python frames carry torch's "Python id",
/// "Python parent id" (the nearest enclosing Python frame) and, for "nn.Module: " slices,
/// "Python module id" args, as torch writes them with_stack/with_modules.
/// `wall_offset_ns` (CLOCK_REALTIME - CLOCK_MONOTONIC) is added to baseTimeNanoseconds, so that
/// base + ts is Unix time as in torch's files (HTA converts timestamps so).
/// `python_heap_instants` false: the Python heap's samples get no "[memory]" instants (the trace
/// holds torch's tensor memory, which the Memory view must read alone).
void write_chrome_json(const TraceSource& source, OutputSink& out, std::string_view extra_members,
                       int64_t wall_offset_ns, bool python_heap_instants = true);
/// Perfetto protobuf: one sequence per thread with incremental timestamps (a sequence-scoped
/// clock), interned names, categories and source locations, TrackDescriptors for processes and
/// threads, SLICE_BEGIN/END (strictly nested: see NestingAdapter), instants for marks, async
/// ranges on a track of their own, counter tracks for memory samples, args for range details.
void write_perfetto(const TraceSource& source, OutputSink& out);
/// pstats: per function (cc, nc, tt, ct, callers) with cProfile's (_lsprof's) meaning, callers
/// per edge as (nc, cc, tt, ct). Python functions are keyed (file, first line, name), anything
/// else ('~', 0, name). Marks are left out.
void write_pstats(const TraceSource& source, OutputSink& out);
/// speedscope: shared frames (name, file, line) and one evented profile per thread in
/// nanoseconds from the trace start. Marks and ranges ended on another thread are left out
/// (the format has no instants, and its events must nest).
void write_speedscope(const TraceSource& source, OutputSink& out);
/// Collapsed stacks: one line per distinct stack, "thread;outer;...;inner <self µs>", the
/// thread's name (and id) as the root frame; integer µs whose sum per thread is the thread's
/// self-time total rounded (remainders carried from line to line).
void write_collapsed(const TraceSource& source, OutputSink& out);

/// Writes `format` to `out`.
void write_format(ExportFormat format, const TraceSource& source, OutputSink& out);

/// How a native format is chosen: its canonical name, its default file extension, the file
/// name endings that pick it (before an optional ".gz") and its other names. Empty strings
/// fill unused slots.
struct FormatNames {
  ExportFormat format;
  std::string_view name;
  std::string_view extension;
  std::string_view suffixes[2];
  std::string_view alias;
};
/// The one table of the native formats' names, in the order the command line lists them
/// (format_for_path and parse_format read it; Python's format registry reads it through
/// `_core.export_formats()`). Static storage, never changes: safe from any thread.
const FormatNames* export_formats(size_t* count);
/// The format a path's ending names, the longest ending first (.speedscope.json before .json;
/// a trailing .gz is ignored): see export_formats(). Throws std::invalid_argument for others.
ExportFormat format_for_path(std::string_view path);
/// The format a name or alias names ("chrome"/"json", "perfetto"/"pftrace", "pstats"/"prof",
/// "speedscope", "collapsed"/"folded"); throws std::invalid_argument for others.
ExportFormat parse_format(std::string_view name);

}  // namespace framescope
