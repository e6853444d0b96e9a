// tests/native/utf8_test.cpp: UTF-8 validation and repair of names entering the core.
#include <gtest/gtest.h>

#include <string>

#include "utf8.h"

namespace framescope_test {
namespace {

using framescope::internal::append_code_point;
using framescope::internal::is_valid_utf8;
using framescope::internal::to_valid_utf8;

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8Test, WellFormedTextIsKeptAsIs) {
  for (std::string s : {std::string(""), std::string("plain"), std::string("caf\xC3\xA9"),
                        std::string("\xE2\x82\xAC 5"), std::string("\xF0\x9F\x98\x80"),
                        std::string("nul\0inside", 10), std::string("\xF4\x8F\xBF\xBF")}) {
    EXPECT_TRUE(is_valid_utf8(s)) << s;
    EXPECT_EQ(to_valid_utf8(s), s);
  }
}

TEST(Utf8Test, IllFormedSequencesBecomeOneReplacementPerMaximalSubpart) {
  // The examples of Unicode 15, section 3.9 (U+FFFD substitution of maximal subparts), which is
  // also what Python's bytes.decode("utf-8", "replace") gives.
  struct Case {
    std::string in, out;
  };
  const Case cases[] = {
      {"\xFF", kFffd},                                      // never a lead byte
      {"a\x80z", "a" + kFffd + "z"},                        // lone continuation byte
      {"\xC0\xAF", kFffd + kFffd},                          // overlong: C0 is never valid
      {"\xE0\x80\xAF", kFffd + kFffd + kFffd},              // overlong 3-byte form
      {"\xED\xA0\x80", kFffd + kFffd + kFffd},              // a surrogate (U+D800)
      {"\xF4\x90\x80\x80", kFffd + kFffd + kFffd + kFffd},  // above U+10FFFF
      {"\xE2\x82", kFffd},                                  // truncated: one subpart
      {"\xE2\x82z", kFffd + "z"},
      {"w\xF0\x9F\x98", "w" + kFffd},
      {"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64",
       "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(is_valid_utf8(c.in));
    EXPECT_EQ(to_valid_utf8(c.in), c.out);
    EXPECT_TRUE(is_valid_utf8(to_valid_utf8(c.in)));
  }
}

TEST(Utf8Test, CodePointsEncodeAndSurrogatesAreReplaced) {
  std::string out;
  append_code_point(out, 'w');
  append_code_point(out, 0xE9);
  append_code_point(out, 0x20AC);
  append_code_point(out, 0x1F600);
  append_code_point(out, 0xDCFF);  // a lone surrogate (Python's surrogateescape)
  append_code_point(out, 0x110000);
  EXPECT_EQ(out, "w\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80" + kFffd + kFffd);
  EXPECT_TRUE(is_valid_utf8(out));
}

}  // namespace
}  // namespace framescope_test
