// The one output routine of the CLI's file-writing commands.
#include "apps/output_file.h"

#include <sys/stat.h>

#include <filesystem>

#include <strata/core/error.h>
#include <strata/tensor/file_io.h>

namespace strata::apps {

void check_output_path(const std::string& path, const std::string& option) {
  if (path.empty()) STRATA_THROW(ConfigError, option, ": is empty: give the file to write");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      STRATA_THROW(ConfigError, option, " '", path, "' is ", file_kind_name(st.st_mode),
                   ": refusing to replace it (give a new path or a regular file)");
    return;
  }
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    STRATA_THROW(ConfigError, option, " '", path, "': the directory '", parent.string(), "' does not exist");
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
