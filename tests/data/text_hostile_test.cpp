// Hostile text corpora: FIFOs and devices as the corpus, symlink loops as the
// path or inside the directory, and a 1 TiB sparse file. Each is one DataError naming
// the file, never a hang, a crash or a bare std::bad_alloc.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <strata/data/text_dataset.h>
#include "test_util.h"
#include "tests/fifo_unblocker.h"

using namespace strata;
using namespace strata::data;
using namespace strata::data::testing;

TEST(TextHostile, FifoAsCorpusIsRefusedWithoutOpening) {
  TempDir dir;
  const std::string path = dir.file("corpus.fifo");
  strata::testing::FifoUnblocker fifo(path);
  ASSERT_TRUE(fifo.ok());
  const std::string msg = data_error([&] { read_text_corpus(path); });
  fifo.done();
  EXPECT_EQ(msg, "[text] " + path + " is a FIFO (named pipe), not a regular file; refusing to open it");
}

TEST(TextHostile, CharacterDeviceAsCorpusIsRefused) {
  EXPECT_EQ(data_error([&] { read_text_corpus("/dev/zero"); }),
            "[text] /dev/zero is a character device, not a regular file; refusing to open it");
}

TEST(TextHostile, SymlinkLoopAsCorpusNamesTheLoop) {
  TempDir dir;
  const std::string a = dir.file("a"), b = dir.file("b");
  ASSERT_EQ(::symlink(b.c_str(), a.c_str()), 0);
  ASSERT_EQ(::symlink(a.c_str(), b.c_str()), 0);
  EXPECT_EQ(data_error([&] { read_text_corpus(a); }),
            "[text] cannot stat corpus " + a + ": Too many levels of symbolic links");
}

TEST(TextHostile, SymlinkLoopsAndFifoInsideDirectoryAreSkipped) {
  TempDir dir;
  write_bytes(dir.file("real.txt"), {'h', 'i'});
  ASSERT_EQ(::symlink(dir.file("y").c_str(), dir.file("x").c_str()), 0);  // x -> y -> x
  ASSERT_EQ(::symlink(dir.file("x").c_str(), dir.file("y").c_str()), 0);
  ASSERT_EQ(::symlink(dir.path().c_str(), dir.file("self").c_str()), 0);  // a directory cycle
  strata::testing::FifoUnblocker fifo(dir.file("pipe"));
  ASSERT_TRUE(fifo.ok());
  const auto bytes = read_text_corpus(dir.path().string());
  fifo.done();
  EXPECT_EQ(bytes, (std::vector<uint8_t>{'h', 'i'}));
}

TEST(TextHostile, HugeSparseCorpusNamesFileAndSize) {
  TempDir dir;
  const std::string path = dir.file("huge.txt");
  write_bytes(path, {'x'});
  std::filesystem::resize_file(path, uint64_t(1) << 40);  // 1 TiB, no blocks on disk
  const std::string msg = data_error([&] { read_text_corpus(path); });
  EXPECT_EQ(
      msg.rfind("[text] " + path + " is 1099511627776 bytes (1.0 TiB); the corpus would hold 1.0 TiB in memory", 0), 0u)
      << msg;
}
