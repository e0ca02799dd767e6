// Diagnostics go through spdlog: warnings, notes,
// per-rank errors and checkpoint messages. stdout stays the user's (progress, results);
// the log is for diagnosis. Every line carries the time, the rank and the level.
#pragma once
#include <spdlog/spdlog.h>

#include <optional>
#include <string>

namespace strata {

/// The log level named by `name`: trace, debug, info, warn, error, critical, off.
/// ConfigError naming `key` (e.g. "run.log_level") for any other value.
spdlog::level::level_enum parse_log_level(const std::string& name, const std::string& key);

/// Sets up the default logger of this process at `level` (default: info on rank 0, warn
/// on the others): into <log_dir>/rank<R>.log when `log_dir` is not empty (created;
/// DataError naming it on failure), and onto stderr, which by default shows warnings and
/// errors only (stdout carries the progress; an explicit level applies to both).
/// $STRATA_LOG_LEVEL, when set, overrides `level`. Lines read
/// "[2026-11-23 20:30:01.123] [rank 1] [warning] ...". Call once per process (again to
/// reconfigure, e.g. after the rank is known); thread-safe afterwards.
void init_logging(int rank, std::optional<spdlog::level::level_enum> level = std::nullopt,
                  const std::string& log_dir = "");

}  // namespace strata
