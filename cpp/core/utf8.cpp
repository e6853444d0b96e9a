// cpp/core/utf8.cpp: UTF-8 validation and repair (U+FFFD for ill-formed input).
#include "utf8.h"

#include <cstdint>

namespace framescope::internal {

namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the sequence that starts at p[0] (n > 0 bytes available) when it is well formed,
// with *ok = true; otherwise *ok = false and the length of its maximal subpart: the lead byte
// and the continuation bytes that were valid so far (at least 1), which one U+FFFD replaces.
size_t scan_sequence(const unsigned char* p, size_t n, bool* ok) noexcept {
  const unsigned char b = p[0];
  *ok = true;
  if (b < 0x80) return 1;
  int need;                            // continuation bytes
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b == 0xE0) {
    need = 2, lo = 0xA0;  // no overlong 3-byte forms
  } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
    need = 2;
  } else if (b == 0xED) {
    need = 2, hi = 0x9F;  // no surrogates
  } else if (b == 0xF0) {
    need = 3, lo = 0x90;  // no overlong 4-byte forms
  } else if (b >= 0xF1 && b <= 0xF3) {
    need = 3;
  } else if (b == 0xF4) {
    need = 3, hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *ok = false;  // a continuation byte, C0/C1 or F5-FF cannot start a sequence
    return 1;
  }
  size_t i = 1;
  for (int k = 0; k < need; ++k, ++i) {
    const unsigned char low = k == 0 ? lo : 0x80, high = k == 0 ? hi : 0xBF;
    if (i >= n || p[i] < low || p[i] > high) {
      *ok = false;
      return i;
    }
  }
  return i;
}

}  // namespace

bool is_valid_utf8(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    if (p[i] < 0x80) {  // ASCII runs, the common case
      ++i;
      continue;
    }
    bool ok;
    i += scan_sequence(p + i, s.size() - i, &ok);
    if (!ok) return false;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    bool ok;
    const size_t len = scan_sequence(p + i, s.size() - i, &ok);
    if (ok) {
      out.append(s.data() + i, len);
    } else {
      out += kReplacement;
    }
    i += len;
  }
  return out;
}

void append_code_point(std::string& out, uint32_t cp) {
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
    out += kReplacement;
  } else if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace framescope::internal
