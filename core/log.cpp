// The default spdlog logger of a strata process (see log.h).
#include <strata/core/log.h>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <filesystem>

#include <strata/core/error.h>

namespace strata {

spdlog::level::level_enum parse_log_level(const std::string& name, const std::string& key) {
  for (auto l : {spdlog::level::trace, spdlog::level::debug, spdlog::level::info, spdlog::level::warn,
                 spdlog::level::err, spdlog::level::critical, spdlog::level::off}) {
    const auto sv = spdlog::level::to_string_view(l);
    if (name == std::string(sv.data(), sv.size()) || (l == spdlog::level::warn && name == "warn") ||
        (l == spdlog::level::err && name == "error"))
      return l;
  }
  STRATA_THROW(ConfigError, key, ": expected one of trace|debug|info|warn|error|critical|off, got '", name, "'");
}

void init_logging(int rank, std::optional<spdlog::level::level_enum> level, const std::string& log_dir) {
  if (const char* env = std::getenv("STRATA_LOG_LEVEL"); env && *env) level = parse_log_level(env, "STRATA_LOG_LEVEL");
  const auto lvl = level.value_or(rank == 0 ? spdlog::level::info : spdlog::level::warn);
  // stderr shares the terminal with the progress on stdout: it shows warnings and errors
  // unless a level was asked for; the rank's file gets everything at `lvl`.
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_level(level ? lvl : std::max(lvl, spdlog::level::warn));
  std::vector<spdlog::sink_ptr> sinks{console};
  if (!log_dir.empty()) {
    const std::string file = (std::filesystem::path(log_dir) / ("rank" + std::to_string(rank) + ".log")).string();
    try {
      std::filesystem::create_directories(log_dir);
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file, /*truncate=*/false));
    } catch (const std::exception& e) {
      STRATA_THROW(DataError, "cannot open the log file '", file, "': ", e.what());
    }
  }
  auto logger = std::make_shared<spdlog::logger>("strata", sinks.begin(), sinks.end());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [rank " + std::to_string(rank) + "] [%l] %v");
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

}  // namespace strata
