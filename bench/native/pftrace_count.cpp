// bench/native/pftrace_count.cpp: counts the TrackEvents of a Perfetto trace by type, streaming.
//
// bench/export.py checks that the Perfetto conversion of a 200 M-event streamed session holds
// every event; parsing that many packets with the Python protos would take hours, so this walks
// the protobuf wire format (Trace.packet = 1, TracePacket.track_event = 11, TrackEvent.type = 9)
// and prints one JSON line: {"packets": N, "slice_begin": N, "slice_end": N, "instant": N,
// "counter": N}. Build: c++ -O2 -std=c++17 pftrace_count.cpp -o pftrace_count
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

bool varint(const uint8_t*& p, const uint8_t* end, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const uint8_t b = *p++;
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Calls fn(field number, wire type, value, payload begin, payload end) for each field.
template <class Fn>
void fields(const uint8_t* p, const uint8_t* end, Fn&& fn) {
  while (p < end) {
    uint64_t tag, v = 0;
    if (!varint(p, end, tag)) throw std::runtime_error("bad tag");
    const uint32_t wire = uint32_t(tag & 7);
    const uint8_t* b = p;
    if (wire == 0) {
      if (!varint(p, end, v)) throw std::runtime_error("bad varint");
    } else if (wire == 1 || wire == 5) {
      p += wire == 1 ? 8 : 4;
    } else if (wire == 2) {
      if (!varint(p, end, v) || v > uint64_t(end - p)) throw std::runtime_error("bad length");
      b = p;
      p += v;
    } else {
      throw std::runtime_error("bad wire type");
    }
    if (p > end) throw std::runtime_error("truncated");
    fn(uint32_t(tag >> 3), wire, v, b, p);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: pftrace_count TRACE.pftrace\n");
    return 2;
  }
  FILE* f = std::fopen(argv[1], "rb");
  if (!f) {
    std::perror(argv[1]);
    return 1;
  }
  uint64_t packets = 0, types[5] = {};
  std::vector<uint8_t> buf;
  size_t have = 0;
  std::vector<uint8_t> chunk(size_t(1) << 24);
  try {
    for (;;) {
      const size_t n = std::fread(chunk.data(), 1, chunk.size(), f);
      buf.resize(have + n);
      std::copy(chunk.begin(), chunk.begin() + long(n), buf.begin() + long(have));
      have += n;
      // Whole packets from the front of the buffer.
      const uint8_t* p = buf.data();
      const uint8_t* end = p + have;
      for (;;) {
        const uint8_t* start = p;
        uint64_t tag, len;
        if (!varint(p, end, tag) || !varint(p, end, len) || len > uint64_t(end - p)) {
          p = start;
          break;
        }
        if (tag != ((1 << 3) | 2)) throw std::runtime_error("not a Trace.packet");
        ++packets;
        fields(p, p + len,
               [&](uint32_t field, uint32_t wire, uint64_t, const uint8_t* b, const uint8_t* e) {
                 if (field != 11 || wire != 2) return;
                 fields(b, e,
                        [&](uint32_t f2, uint32_t w2, uint64_t v, const uint8_t*, const uint8_t*) {
                          if (f2 == 9 && w2 == 0 && v < 5) ++types[v];
                        });
               });
        p += len;
      }
      const size_t used = size_t(p - buf.data());
      buf.erase(buf.begin(), buf.begin() + long(used));
      have -= used;
      if (n == 0) break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pftrace_count: %s\n", e.what());
    return 1;
  }
  std::fclose(f);
  if (have) {
    std::fprintf(stderr, "pftrace_count: %zu trailing bytes\n", have);
    return 1;
  }
  std::printf(
      "{\"packets\": %llu, \"slice_begin\": %llu, \"slice_end\": %llu, \"instant\": %llu, "
      "\"counter\": %llu}\n",
      (unsigned long long)packets, (unsigned long long)types[1], (unsigned long long)types[2],
      (unsigned long long)types[3], (unsigned long long)types[4]);
  return 0;
}
