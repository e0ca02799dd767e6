// Utf8Writer: what `strata sample` prints is valid UTF-8 whatever bytes the model emits.
#include <gtest/gtest.h>

#include <cstdio>

#include "apps/utf8_writer.h"

namespace strata::apps {
namespace {

std::string through(const std::string& bytes) {
  std::FILE* sink = std::fopen("/dev/null", "w");
  Utf8Writer w(sink);
  for (unsigned char c : bytes) w.put(c);
  w.finish();
  std::fclose(sink);
  return w.written();
}

TEST(Utf8Writer, ValidTextPassesUnchanged) {
  EXPECT_EQ(through("The river"), "The river");
  EXPECT_EQ(through("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
}

TEST(Utf8Writer, InvalidBytesAreEscaped) {
  EXPECT_EQ(through("a\xff" "b"), "a\\xffb");
  EXPECT_EQ(through("\x80"), "\\x80");                      // a lone continuation byte
  EXPECT_EQ(through("\xc3" "A"), "\\xc3A");                 // a lead byte cut short, then ASCII
  EXPECT_EQ(through("\xe2\x82"), "\\xe2\\x82");             // a truncated character at the end
  EXPECT_EQ(through("\xc0\xaf"), "\\xc0\\xaf");             // an overlong '/'
  EXPECT_EQ(through("\xed\xa0\x80"), "\\xed\\xa0\\x80");    // a UTF-16 surrogate
  EXPECT_EQ(through("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(through("\xc3\xc3\xa9"), "\\xc3\xc3\xa9");      // the second lead starts a valid character
}

}  // namespace
}  // namespace strata::apps
