// The per-thread override of the default generator: while a DefaultGeneratorOverride
// lives, default_generator() on its thread is the given generator, the process-wide
// one is neither read nor written, overrides nest, and other threads never see them.
#include <gtest/gtest.h>

#include <thread>

#include <strata/core/generator_override.h>

using namespace strata;

TEST(DefaultGeneratorOverride, RedirectsThisThreadAndRestores) {
  manual_seed(11);
  Generator& process = default_generator();
  process.reserve(8);  // offset 2
  Generator a(5), b(6);
  {
    DefaultGeneratorOverride use_a(a);
    EXPECT_EQ(&default_generator(), &a);
    default_generator().reserve(4);  // a: offset 1
    manual_seed(77);                 // resets a, not the process generator
    EXPECT_EQ(a.seed(), 77u);
    EXPECT_EQ(a.offset(), 0u);
    {
      DefaultGeneratorOverride use_b(b);
      EXPECT_EQ(&default_generator(), &b);
      default_generator().reserve(12);
    }
    EXPECT_EQ(&default_generator(), &a);  // the inner override ended: back to a
    EXPECT_EQ(b.offset(), 3u);
  }
  EXPECT_EQ(&default_generator(), &process);
  EXPECT_EQ(process.seed(), 11u);
  EXPECT_EQ(process.offset(), 2u);
}

TEST(DefaultGeneratorOverride, OtherThreadsKeepTheProcessGenerator) {
  manual_seed(3);
  Generator* process = &default_generator();
  Generator mine(9);
  DefaultGeneratorOverride use(mine);
  Generator* seen_there = nullptr;
  std::thread([&] { seen_there = &default_generator(); }).join();
  EXPECT_EQ(seen_there, process);
  EXPECT_EQ(&default_generator(), &mine);
}
