// A gtest fixture owning a fresh temporary directory per test (removed afterwards), for
// tests that write runs, checkpoints or files.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace strata::testing {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("strata_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  /// `name` inside this test's directory.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

}  // namespace strata::testing
