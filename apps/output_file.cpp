// The one output routine of the CLI's file-writing commands.
#include "apps/output_file.h"

#include <sys/stat.h>

#include <filesystem>

#include <strata/core/error.h>
#include <strata/tensor/file_io.h>

namespace strata::apps {
namespace {

// A new output `path` must go into a directory that exists (ConfigError naming `option`).
void require_parent_directory(const std::string& path, const std::string& option) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    STRATA_THROW(ConfigError, option, " '", path, "': the directory '", parent.string(), "' does not exist");
}

}  // namespace

void check_output_path(const std::string& path, const std::string& option) {
  if (path.empty()) STRATA_THROW(ConfigError, option, ": is empty: give the file to write");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      STRATA_THROW(ConfigError, option, " '", path, "' is ", file_kind_name(st.st_mode),
                   ": refusing to replace it (give a new path or a regular file)");
    return;
  }
  require_parent_directory(path, option);
}

void check_output_dir(const std::string& out_arg, const std::string& option, bool overwrite) {
  if (out_arg.empty()) STRATA_THROW(ConfigError, option, ": is empty: give the directory to write");
  std::string out = out_arg;  // "link/" would resolve a symlink: judge the name itself
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  struct stat st {};
  if (::lstat(out.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      STRATA_THROW(ConfigError, option, " '", out, "' is ", file_kind_name(st.st_mode),
                   ": refusing to replace it (give a new path or a directory)");
    std::error_code ec;
    if (!std::filesystem::is_empty(out, ec) && !overwrite)
      STRATA_THROW(ConfigError, option, " '", out, "' is a directory that is not empty: give a new path, or --overwrite "
                   "to replace it");
    return;
  }
  require_parent_directory(out, option);
}

std::unique_ptr<AtomicFileWriter> open_output_file(const std::string& path, const std::string& option) {
  check_output_path(path, option);
  return std::make_unique<AtomicFileWriter>(path);
}

void write_output_file(const std::string& path, const std::string& option, const std::string& text) {
  check_output_path(path, option);
  write_file_atomic(path, text);
}

}  // namespace strata::apps
