// Reading and checking the `parallel:` config section (see parallel_config.h).
#include <strata/parallel/parallel_config.h>

#include <algorithm>
#include <thread>

namespace strata::parallel {
namespace {

// The rules parallel.devices must follow beyond parsing: one entry per replica, all cpu
// or all cuda, no CUDA device twice. `line` (0 = unknown) goes into the error.
void check_devices(const ParallelConfig& c, int line) {
  const auto& d = c.devices;
  if (d.empty()) return;
  for (size_t k = 0; k < d.size(); ++k) {
    const std::string key = "parallel.devices[" + std::to_string(k) + "]";
    if (d[k].type != d[0].type)
      config_fail(key, "is " + d[k].str() + " but parallel.devices[0] is " + d[0].str() +
                           "; give all cpu, or distinct cuda:N", line);
    if (d[k].type == DeviceType::CUDA)
      for (size_t j = 0; j < k; ++j)
        if (d[j] == d[k])
          config_fail(key, d[k].str() + " is listed twice (also parallel.devices[" + std::to_string(j) +
                               "]); each CUDA device holds one replica", line);
  }
  if (size_t(c.replicas) != d.size())
    config_fail("parallel.devices", "lists " + std::to_string(d.size()) + " device(s) but parallel.replicas is " +
                                        std::to_string(c.replicas) +
                                        " (one replica per device; drop parallel.replicas to derive it)", line);
}

// parallel.mode was replaced by degrees: say what to write instead.
[[noreturn]] void removed_mode(const ConfigNode& n) {
  const std::string mode = n.get("mode", std::string());
  const std::string instead =
      mode == "ddp"  ? "DDP is the default under mpirun: delete the key (parallel.dp: auto takes every rank; "
                       "add zero_stage: 1|2|3 for ZeRO)"
      : mode == "dp" ? "thread replicas in one process are parallel.replicas: K (DataParallel); delete the key"
      : mode == "none" ? "delete the key (one process is the default)"
                       : "the layout is given by degrees: parallel: {dp: auto, tp: 1, pp: 1, zero_stage: 0}";
  n.fail("mode", "was removed ('" + mode + "'): " + instead);
}

// parallel.{pp_schedule, microbatches, pp_virtual, pp_layers, pp_exchanges}.
void read_pipeline(const ConfigNode& n, ParallelConfig& c) {
  const std::string ex = n.get("pp_exchanges", std::string("auto"));
  if (ex == "auto")
    c.pipeline.exchanges = PipelineExchanges::automatic;
  else if (ex == "inline")
    c.pipeline.exchanges = PipelineExchanges::inline_;
  else if (ex == "thread")
    c.pipeline.exchanges = PipelineExchanges::thread;
  else
    n.fail("pp_exchanges", "expected one of auto|inline|thread, got '" + ex + "'");
  const std::string sched = n.get("pp_schedule", std::string(schedule_name(c.pipeline.schedule)));
  if (!parse_schedule(sched, c.pipeline.schedule))
    n.fail("pp_schedule", "expected one of gpipe|1f1b|interleaved|zb-h1, got '" + sched + "'");
  // 0 (the default) = one per stage, pp.
  const int64_t m = n.get("microbatches", int64_t(0));
  n.check_range("microbatches", double(m), 0, 1 << 20);
  c.pipeline.microbatches = m == 0 ? c.dims.pp : int(m);
  c.pipeline.virtual_stages = n.get("pp_virtual", c.pipeline.virtual_stages);
  n.check_range("pp_virtual", c.pipeline.virtual_stages, 1, 1 << 10);
  c.pp_layers = n.get("pp_layers", c.pp_layers);
  if (c.dims.pp > 1) {
    const std::string bad =
        ScheduleShape{c.pipeline.schedule, c.dims.pp, c.pipeline.microbatches, c.pipeline.virtual_stages}.invalid();
    if (!bad.empty()) {
      const std::string key = bad.substr(0, bad.find(' '));
      n.fail(key.substr(key.find('.') + 1), bad.substr(bad.find(' ') + 1));
    }
    if (!c.pp_layers.empty() && int64_t(c.pp_layers.size()) != int64_t(c.dims.pp) * c.pipeline.virtual_stages)
      n.fail("pp_layers", "has " + std::to_string(c.pp_layers.size()) + " entries but there are " +
                              std::to_string(c.dims.pp * c.pipeline.virtual_stages) + " stages (pp x pp_virtual)");
  }
}

}  // namespace

ParallelConfig ParallelConfig::from_node(const ConfigNode& n) {
  ParallelConfig c;
  if (n.has("mode")) removed_mode(n);
  if (n.has("dp") && n.yaml()["dp"].IsScalar() && n.yaml()["dp"].Scalar() == "auto") {
    c.dims.dp = ParallelDims::kAuto;
  } else {
    c.dims.dp = n.get("dp", c.dims.dp);
    if (n.has("dp")) n.check_range("dp", c.dims.dp, 1, 1 << 20);
  }
  n.note_read("dp", "integer or auto", "auto", YAML::Node(c.dims.dp == ParallelDims::kAuto ? "auto" : std::to_string(c.dims.dp)));
  c.dims.tp = n.get("tp", c.dims.tp);
  n.check_range("tp", c.dims.tp, 1, 1 << 20);
  c.dims.pp = n.get("pp", c.dims.pp);
  n.check_range("pp", c.dims.pp, 1, 1 << 20);
  c.dims.zero_stage = n.get("zero_stage", c.dims.zero_stage);
  n.check_range("zero_stage", c.dims.zero_stage, 0, 3);
  // HSDP: dp_shard ranks per ZeRO shard group (0 = every dp rank); dp_replicate may be
  // given instead or as well (checked against dp once it is resolved).
  c.dims.dp_shard = n.get("dp_shard", c.dims.dp_shard);
  n.check_range("dp_shard", c.dims.dp_shard, 0, 1 << 20);
  c.dims.dp_replicate = n.get("dp_replicate", c.dims.dp_replicate);
  n.check_range("dp_replicate", c.dims.dp_replicate, 0, 1 << 20);
  c.dims.cp = n.get("cp", c.dims.cp);
  n.check_range("cp", c.dims.cp, 1, 1 << 20);
  c.dims.ep = n.get("ep", c.dims.ep);
  n.check_range("ep", c.dims.ep, 1, 1 << 20);
  c.cp_split = n.get("cp_split", c.cp_split);
  if (c.cp_split != "zigzag" && c.cp_split != "plain")
    n.fail("cp_split", "expected one of zigzag|plain, got '" + c.cp_split + "'");
  if (c.thread_replicas() && c.dims.cp != 1)
    n.fail("cp", "is " + std::to_string(c.dims.cp) +
                     " but parallel.replicas runs thread replicas in one process (DataParallel); start cp ranks with mpirun");
  const bool replicas_given = n.has("replicas");
  c.replicas = n.get("replicas", c.replicas);
  if (replicas_given) n.check_range("replicas", c.replicas, 1, 1024);
  // Absent means off (or one replica per parallel.devices): shown as null, not as 0, which is refused.
  n.note_read("replicas", "integer", "null", replicas_given ? YAML::Node(c.replicas) : YAML::Node());
  const auto device_names = n.get("devices", std::vector<std::string>{});
  for (size_t k = 0; k < device_names.size(); ++k) {
    const auto d = try_parse_device(device_names[k]);
    if (!d)
      config_fail(n.key_path("devices") + "[" + std::to_string(k) + "]", not_a_device(device_names[k]),
                  n.line_of("devices"));
    c.devices.push_back(*d);
  }
  if (!c.devices.empty() && !replicas_given) c.replicas = int(c.devices.size());
  check_devices(c, n.line_of("devices"));
  if (c.thread_replicas() && c.dims.zero_stage != 0)
    n.fail("zero_stage", "is " + std::to_string(c.dims.zero_stage) +
                             " but parallel.replicas runs thread replicas in one process (DataParallel), which "
                             "does not shard; use zero_stage 0, or drop replicas and start ranks with mpirun");
  c.ddp.bucket_cap_mb = n.get("bucket_cap_mb", c.ddp.bucket_cap_mb);
  n.check_range("bucket_cap_mb", c.ddp.bucket_cap_mb, 0, 1e6, /*lo_open=*/true);
  c.ddp.first_bucket_mb = n.get("first_bucket_mb", c.ddp.first_bucket_mb);
  n.check_range("first_bucket_mb", c.ddp.first_bucket_mb, 0, 1e6, /*lo_open=*/true);
  c.ddp.last_bucket_mb = n.get("last_bucket_mb", c.ddp.last_bucket_mb);
  n.check_range("last_bucket_mb", c.ddp.last_bucket_mb, 0, 1e6, /*lo_open=*/true);
  c.ddp.find_unused_parameters = n.get("find_unused_parameters", c.ddp.find_unused_parameters);
  c.ddp.broadcast_buffers = n.get("broadcast_buffers", c.ddp.broadcast_buffers);
  c.ddp.gradient_as_bucket_view = n.get("gradient_as_bucket_view", c.ddp.gradient_as_bucket_view);
  c.fsdp_prefetch = n.get("fsdp_prefetch", c.fsdp_prefetch);
  c.sequence_parallel = n.get("sequence_parallel", c.sequence_parallel);
  read_pipeline(n, c);
  c.validate();
  return c;
}

void ParallelConfig::validate() const {
  if (dims.dp != ParallelDims::kAuto && dims.dp < 1)
    config_fail("parallel.dp", "must be >= 1 or auto, got " + std::to_string(dims.dp));
  if (dims.tp < 1) config_fail("parallel.tp", "must be >= 1, got " + std::to_string(dims.tp));
  if (dims.pp < 1) config_fail("parallel.pp", "must be >= 1, got " + std::to_string(dims.pp));
  if (dims.cp < 1) config_fail("parallel.cp", "must be >= 1, got " + std::to_string(dims.cp));
  if (cp_split != "zigzag" && cp_split != "plain")
    config_fail("parallel.cp_split", "expected one of zigzag|plain, got '" + cp_split + "'");
  if (dims.zero_stage < 0 || dims.zero_stage > 3)
    config_fail("parallel.zero_stage", "expected a value in [0, 3], got " + std::to_string(dims.zero_stage));
  if (dims.dp_shard < 0) config_fail("parallel.dp_shard", "must be >= 0, got " + std::to_string(dims.dp_shard));
  if (dims.dp_replicate < 0)
    config_fail("parallel.dp_replicate", "must be >= 0, got " + std::to_string(dims.dp_replicate));
  if (replicas < 0) config_fail("parallel.replicas", "must be >= 1, got " + std::to_string(replicas));
  if (thread_replicas() && dims.zero_stage != 0)
    config_fail("parallel.zero_stage", "is " + std::to_string(dims.zero_stage) +
                                           " but parallel.replicas runs thread replicas (DataParallel), which does "
                                           "not shard");
  check_devices(*this, 0);
  ddp.validate();
}

int ParallelConfig::intra_op_threads(int threads) const {
  if (!thread_replicas()) return threads;
  const int total = threads > 0 ? threads : int(std::thread::hardware_concurrency());
  return std::max(1, total / replicas);
}

}  // namespace strata::parallel
