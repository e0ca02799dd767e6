// hf_model_tool: what the interop tests ask of strata, written to files Python compares
// with transformers' own results.
//   logits    --model M --ids "1,2,3;4,5,6" --out F   logits (B, T, V) of the batch, f32
//   grads     --model M --ids ... --out F             mean next-token loss of the batch
//             (targets: the ids shifted by one, as transformers' labels=ids) and every
//             parameter's gradient, under strata's names
//   roundtrip --model DIR --out DIR2 [--max-shard-size S]
//             the directory read as strata's global tensors and exported again
// M is a Hugging Face model directory or a strata checkpoint (or run dir). Exit 1 with
// the error on stderr when anything fails, 2 on bad arguments.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/factory.h"
#include "apps/hf/hf_reader.h"
#include "apps/hf/hf_writer.h"
#include <strata/autograd/engine.h>
#include <strata/autograd/grad_mode.h>
#include <strata/parallel/checkpoint/training.h>
#include <strata/tensor/ops.h>
#include <strata/tensor/safetensors.h>

namespace {
using namespace strata;

// "1,2,3;4,5,6" -> (2, 3) i64.
Tensor parse_batch(const std::string& text) {
  std::vector<int64_t> ids;
  int64_t rows = 0, cols = -1, in_row = 0;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) ids.push_back(std::stoll(cur)), ++in_row;
    cur.clear();
  };
  for (char c : text + ";") {
    if (c == ',') {
      flush();
    } else if (c == ';') {
      flush();
      if (cols >= 0 && in_row != cols) throw ConfigError("--ids: rows of different lengths");
      cols = in_row;
      in_row = 0;
      ++rows;
    } else {
      cur += c;
    }
  }
  return ops::from_vector(ids, {rows, cols});
}

// The model and the config that built it, from a Hugging Face directory or a checkpoint.
apps::HfModel load_model(const std::string& path) {
  if (apps::hf::is_hf_model_dir(path)) return apps::load_hf_model(path);
  const parallel::Checkpoint ck = parallel::read_checkpoint(path, false);
  apps::HfModel m{apps::config_from_checkpoint(ck, {}), nullptr};
  Generator init(m.cfg.run.seed);
  m.model = apps::build_model(m.cfg, init);
  parallel::load_into(ck, *m.model, nullptr);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> opt;
  if (argc < 2 || (argc - 2) % 2 != 0) {
    std::fprintf(stderr, "usage: hf_model_tool logits|grads|roundtrip --model M [--ids I] --out F [--max-shard-size S]\n");
    return 2;
  }
  const std::string cmd = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) opt[argv[i]] = argv[i + 1];
  try {
    if (cmd == "roundtrip") {
      const apps::hf::HfModelDir src(opt.at("--model"));
      apps::hf::HfExportOptions o;
      if (opt.count("--max-shard-size")) o.max_shard_bytes = apps::hf::parse_shard_size(opt["--max-shard-size"], "--max-shard-size");
      const auto r = apps::hf::export_hf(src, src.spec(), opt.at("--out"), o);
      std::printf("%d tensors in %d files\n", r.tensors, r.files);
      return 0;
    }
    const apps::HfModel m = load_model(opt.at("--model"));
    m.model->eval();
    const Tensor ids = parse_batch(opt.at("--ids"));
    if (cmd == "logits") {
      NoGradGuard no_grad;
      save_safetensors(opt.at("--out"), {{"logits", ops::contiguous(m.model->forward(ids))}});
      return 0;
    }
    if (cmd == "grads") {
      const int64_t T = ids.shape()[1];
      const Tensor x = ops::contiguous(ops::narrow(ids, 1, 0, T - 1)), y = ops::contiguous(ops::narrow(ids, 1, 1, T - 1));
      const Tensor loss = apps::batch_loss(*m.model, m.cfg, {x, y});  // the family's training loss
      backward(loss);
      NamedTensors out{{"loss", ops::reshape(loss, {1})}};
      for (const auto& [n, p] : m.model->named_parameters()) out.emplace_back(n, p.grad());
      save_safetensors(opt.at("--out"), out);
      return 0;
    }
    std::fprintf(stderr, "hf_model_tool: unknown command '%s'\n", cmd.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_model_tool: %s\n", e.what());
    return 1;
  }
}
