// The timeline recorder (see trace.h): one event buffer per thread, each behind its own
// (uncontended) mutex so a comm thread can finish a slice while another thread writes.
#include <strata/core/trace.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <utility>
#include <unordered_map>
#include <vector>

#include <strata/core/error.h>

namespace strata::trace {

namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

struct Event {
  std::string name;
  std::string args;  // a JSON object's members ("\"mb\":3,\"op\":\"x\""), possibly empty
  int64_t t0_ns = 0;
  int64_t dur_ns = -1;  // -1: still open
  Cat cat = Cat::compute;
};

struct ThreadBuf {
  std::mutex mu;
  std::vector<Event> events;
  std::string name;
  int tid = 0;
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<ThreadBuf>> bufs;
  std::atomic<uint64_t> generation{1};
  int64_t sys_offset_ns = 0;  // system clock - steady clock, taken at start()
  std::mutex label_mu;
  std::deque<std::string> labels{""};
  std::unordered_map<std::string, uint32_t> label_ids;
  std::unordered_map<const void*, std::string> objects;
};

Registry& reg() {
  static Registry* r = new Registry;  // never destroyed: comm threads may record during exit
  return *r;
}

thread_local std::shared_ptr<ThreadBuf> t_buf;
thread_local uint32_t t_label = 0;
thread_local OpTag t_tag;

ThreadBuf& my_buf() {
  if (!t_buf) {
    auto b = std::make_shared<ThreadBuf>();
    Registry& r = reg();
    std::lock_guard<std::mutex> lk(r.mu);
    b->tid = int(r.bufs.size());
    b->name = b->tid == 0 ? "main" : "thread " + std::to_string(b->tid);
    r.bufs.push_back(b);
    t_buf = std::move(b);
  }
  return *t_buf;
}

void append_escaped(std::string& out, std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
}

// Microseconds with nanosecond digits, exact (a double would round absolute times).
std::string micros(int64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
  return buf;
}

}  // namespace

const char* cat_name(Cat c) {
  switch (c) {
    case Cat::compute: return "compute";
    case Cat::comm: return "comm";
    case Cat::wait: return "wait";
    case Cat::pipeline: return "pipeline";
    case Cat::step: return "step";
    case Cat::hook: return "hook";
    case Cat::other: break;
  }
  return "other";
}

void Scope::begin(std::string_view name, std::initializer_list<Arg> args, Cat cat) {
  if (!enabled() || index_ >= 0) return;
  Event e;
  e.name.assign(name);
  e.cat = cat;
  for (const Arg& a : args) {
    if (!a.key) continue;
    if (!e.args.empty()) e.args += ',';
    e.args += '"';
    append_escaped(e.args, a.key);
    e.args += "\":";
    if (a.is_str) {
      e.args += '"';
      append_escaped(e.args, a.str);
      e.args += '"';
    } else {
      e.args += std::to_string(a.num);
    }
  }
  ThreadBuf& b = my_buf();
  generation_ = reg().generation.load(std::memory_order_relaxed);
  e.t0_ns = now_ns();
  std::lock_guard<std::mutex> lk(b.mu);
  index_ = int64_t(b.events.size());
  b.events.push_back(std::move(e));
}

void Scope::end() {
  if (index_ < 0) return;
  const int64_t t1 = now_ns();
  ThreadBuf& b = my_buf();
  std::lock_guard<std::mutex> lk(b.mu);
  if (generation_ == reg().generation.load(std::memory_order_relaxed) && size_t(index_) < b.events.size()) {
    Event& e = b.events[size_t(index_)];
    e.dur_ns = t1 - e.t0_ns;
  }
  index_ = -1;
}

void set_thread_name(std::string name) {
  ThreadBuf& b = my_buf();
  std::lock_guard<std::mutex> lk(b.mu);
  b.name = std::move(name);
}

uint32_t intern(std::string_view label) {
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.label_mu);
  auto [it, inserted] = r.label_ids.try_emplace(std::string(label), uint32_t(r.labels.size()));
  if (inserted) r.labels.emplace_back(label);
  return it->second;
}

const std::string& label(uint32_t id) {
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.label_mu);
  return id < r.labels.size() ? r.labels[id] : r.labels[0];  // deque: references stay valid
}

uint32_t current_label() { return t_label; }

LabelScope::LabelScope(uint32_t id) : prev_(t_label) { t_label = id; }
LabelScope::~LabelScope() { t_label = prev_; }

void name_object(const void* obj, std::string name) {
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.label_mu);
  r.objects[obj] = std::move(name);
}

std::string object_name(const void* obj) {
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.label_mu);
  auto it = r.objects.find(obj);
  return it == r.objects.end() ? std::string() : it->second;
}

void detail::set_op_tag(const char* key, int64_t value) { t_tag = {key, value}; }

OpTag take_op_tag() { return std::exchange(t_tag, OpTag{}); }

void start() {
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.mu);
  for (auto& b : r.bufs) {
    std::lock_guard<std::mutex> bl(b->mu);
    b->events.clear();
  }
  r.generation.fetch_add(1, std::memory_order_relaxed);
  r.sys_offset_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count() - now_ns();
  detail::g_on.store(true, std::memory_order_relaxed);
}

void stop() { detail::g_on.store(false, std::memory_order_relaxed); }

int64_t event_count() {
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.mu);
  int64_t n = 0;
  for (auto& b : r.bufs) {
    std::lock_guard<std::mutex> bl(b->mu);
    n += int64_t(b->events.size());
  }
  return n;
}

std::string to_json(int rank) {
  Registry& r = reg();
  std::string out = "{\"traceEvents\":[\n";
  out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(rank) + ",\"tid\":0,\"args\":{\"name\":\"rank " +
         std::to_string(rank) + "\"}}";
  {
    std::lock_guard<std::mutex> lk(r.mu);
    for (auto& b : r.bufs) {
      std::lock_guard<std::mutex> bl(b->mu);
      const std::string ids = ",\"pid\":" + std::to_string(rank) + ",\"tid\":" + std::to_string(b->tid);
      out += ",\n{\"ph\":\"M\",\"name\":\"thread_name\"" + ids + ",\"args\":{\"name\":\"";
      append_escaped(out, b->name);
      out += "\"}}";
      out += ",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\"" + ids + ",\"args\":{\"sort_index\":" +
             std::to_string(b->name == "main" ? 0 : b->tid + 1) + "}}";  // the main thread on top
      for (const Event& e : b->events) {
        if (e.dur_ns < 0) continue;  // still open when recording stopped
        out += ",\n{\"ph\":\"X\",\"name\":\"";
        append_escaped(out, e.name);
        out += "\",\"cat\":\"";
        out += cat_name(e.cat);
        out += "\"" + ids + ",\"ts\":" + micros(e.t0_ns + r.sys_offset_ns) + ",\"dur\":" + micros(e.dur_ns);
        if (!e.args.empty()) out += ",\"args\":{" + e.args + "}";
        out += "}";
      }
    }
  }
  out += "\n],\"displayTimeUnit\":\"ms\"}\n";
  return out;
}

void write_json(const std::string& path, int rank) {
  const std::string out = to_json(rank);
  const std::string tmp = path + ".tmp";
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(out.data(), std::streamsize(out.size()));
    f.close();
    if (!f) {
      std::filesystem::remove(tmp, ec);
      STRATA_THROW(DataError, "cannot write the trace file '", path, "'");
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    STRATA_THROW(DataError, "cannot write the trace file '", path, "': ", ec.message());
  }
}

}  // namespace strata::trace
