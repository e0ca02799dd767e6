// Every file a command writes on the user's behalf (`strata plot -o`, `strata trace merge
// -o`, `strata ckpt consolidate --out`) goes through here: only a new path in an existing
// directory or an existing regular file is ever replaced, never a device, FIFO, symlink or
// directory (as root, `-o /dev/null` must not replace the machine's /dev/null), and the
// file is written atomically (a temporary beside it, renamed over it; removed on failure).
// A command that writes a directory (`strata ckpt export --out`) is checked here too, and
// commits it the same way (commit_dir: a temporary directory beside it, renamed).
#pragma once
#include <memory>
#include <string>

#include <strata/tensor/file_io.h>

namespace strata::apps {

/// ConfigError (exit 2) naming `option` and the path unless `path` is a new name in an
/// existing directory or an existing regular file. Call it before the command's work.
void check_output_path(const std::string& path, const std::string& option);

/// ConfigError (exit 2) naming `option` unless `out` is a new name in an existing
/// directory, an empty directory, or (with `overwrite`) an existing directory; never a
/// file, symlink, device or FIFO. Call it before the command's work.
void check_output_dir(const std::string& out, const std::string& option, bool overwrite);

/// check_output_path, then an atomic writer for output too large to hold in memory
/// (`strata tokenize`): nothing appears at `path` until its commit().
std::unique_ptr<AtomicFileWriter> open_output_file(const std::string& path, const std::string& option);

/// check_output_path, then the atomic write of `text` to `path`.
void write_output_file(const std::string& path, const std::string& option, const std::string& text);

}  // namespace strata::apps
