// The --dump format shared by `reference` and `run`: .npy files and a manifest.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/output.h"
#include "core/npy.h"
#include "device/backend.h"
#include "kernels/philox.h"

namespace ringside::cli {

namespace {

// Every file a dump writes, in writing order: the inputs, the weights and masks, the results,
// and the manifest last.
std::vector<std::string> dump_files(const LayerConfig& cfg) {
  std::vector<std::string> files{"x.npy", "dout.npy"};
  for (auto& [name, shape] : weight_shapes(cfg)) files.push_back(name + ".npy");
  files.insert(files.end(), {"dropout1.mask.npy", "dropout2.mask.npy", "out.npy", "grad.x.npy"});
  for (auto& [name, shape] : weight_shapes(cfg)) files.push_back("grad." + name + ".npy");
  files.push_back("manifest.json");
  return files;
}

// The files of parameters that a dump of another layer writes and this one does not (beta,
// the biases), found in dir as regular files: the leftovers of an earlier dump.
std::vector<std::string> stale_files(const std::vector<std::string>& written, const std::filesystem::path& dir) {
  std::vector<std::string> stale;
  LayerWeights every;
  for (auto& [name, slot] : every.slots())
    for (const std::string& f : {name + ".npy", "grad." + name + ".npy"}) {
      std::error_code ec;
      if (std::find(written.begin(), written.end(), f) == written.end() &&
          std::filesystem::is_regular_file(std::filesystem::symlink_status(dir / f, ec)))
        stale.push_back(f);
    }
  return stale;
}

// The attention mask, as an oracle needs it to rebuild it: the documents as FlashAttention's
// cu_seqlens over the real tokens, the window, the RoPE positions, and where the run's shards
// put each document among S slots (segments: real tokens [real, real + len) at slots
// [slot, slot + len), then padded - len slots of padding). The tensors hold real tokens only.
nlohmann::json mask_json(const LayerConfig& cfg, const Packing& packing) {
  std::vector<int64_t> cu_seqlens{0};
  for (const Segment& g : packing.segments)
    if (g.len > 0) cu_seqlens.push_back(g.real + g.len);
  nlohmann::json segments = nlohmann::json::array();
  for (const Segment& g : packing.segments)
    segments.push_back({{"slot", g.slot}, {"real", g.real}, {"len", g.len}, {"padded", g.padded}});
  return {{"cu_seqlens", cu_seqlens},
          {"causal", cfg.causal},
          {"window", cfg.window},
          {"rule", "query i sees key j of its own document when j <= i (causal) and i - j < window "
                   "(|i - j| < window if not causal); window 0 is none"},
          {"rope_positions", to_string(cfg.rope_positions)},
          {"padding", {{"s", packing.s}, {"S", packing.S}, {"segments", segments}}}};
}

}  // namespace

void prepare_dump_dir(const std::string& d, const LayerConfig& cfg) {
  namespace fs = std::filesystem;
  const fs::path dir = d;
  std::error_code ec;
  if (fs::is_symlink(dir, ec) && !fs::exists(dir, ec))
    throw ConfigError("--dump: " + d + " is a symlink to nothing (" + fs::read_symlink(dir, ec).string() + ")");
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw ConfigError("--dump: " + d + " is not a directory (it holds a manifest and a .npy file per tensor)");
  fs::create_directories(dir, ec);
  if (ec) throw ConfigError("--dump: cannot create directory " + d + ": " + ec.message());
  // Every file the dump will replace, as any output is checked (core/output.h); and only
  // regular files: a dump is renamed into place, which would replace a pipe, a device or a link.
  for (const std::string& f : dump_files(cfg)) {
    const fs::path p = dir / f;
    const fs::file_status st = fs::symlink_status(p, ec);
    if (fs::exists(st) && !fs::is_regular_file(st))
      throw ConfigError("--dump: cannot write " + p.string() + ": it is not a regular file (a dump holds only its own files)");
    output::check(p.string(), "--dump");
  }
}

// Whole dumps: the files are written into a fresh directory inside DIR, then moved into DIR,
// the manifest last, under a lock on DIR. A dump that fails partway (a full disk) leaves DIR
// as it was, and two dumps into one DIR never mix their files.
size_t write_dump(const std::string& d, const LayerConfig& cfg, const nlohmann::json& config, const Packing& packing,
                const Tensor& out,
                const Tensor& dx, const LayerWeights& grads, const std::string& producer) {
  namespace fs = std::filesystem;
  const fs::path dir = d;
  fs::create_directories(dir);
  const output::StagingDirectory staging_dir(d);
  const fs::path staging = staging_dir.path();

  nlohmann::json manifest;
  manifest["ringside_version"] = RINGSIDE_VERSION;
  manifest["producer"] = producer;
  manifest["config"] = config;
  manifest["dtype"] = "float32";
  manifest["order"] = "C";
  manifest["mask"] = mask_json(cfg, packing);
  auto& files = manifest["tensors"];
  auto write = [&](const std::string& name, const Tensor& t) {
    const std::string file = name + ".npy";
    write_npy((staging / file).string(), t.dtype() == DType::f32 ? t : t.to(DType::f32, {}));
    files[name] = {{"file", file}, {"shape", t.shape()}};
  };
  write("x", random_input(cfg, static_cast<uint32_t>(RngSite::input_x), DType::f32, {}));
  write("dout", random_input(cfg, static_cast<uint32_t>(RngSite::input_dout), DType::f32, {}));
  const LayerWeights weights = init_weights(cfg, DType::f32, {});  // named() points into it: keep it alive
  for (auto& [name, t] : weights.named()) write(name, *t);
  auto be = make_cpu_backend();
  std::vector<int64_t> positions(cfg.s);
  for (int64_t t = 0; t < cfg.s; ++t) positions[t] = t;
  for (auto [site, name] : {std::pair{RngSite::dropout1, "dropout1.mask"}, {RngSite::dropout2, "dropout2.mask"}}) {
    Tensor mask = be->empty({cfg.b, cfg.s, cfg.h}, DType::f32, {});
    be->dropout_mask(mask, positions, cfg.s, cfg.dropout, cfg.seed, static_cast<uint32_t>(site));
    write(name, mask);
  }
  for (auto& [name, t] : named_results(out, dx, grads)) write(name, *t);
  output::write((staging / "manifest.json").string(), manifest.dump(2) + "\n", "--dump");

  // Into DIR, one rename a file, the manifest last, under the lock (another dump waits for it,
  // a minute at most) and with the signals that end a run held until the last rename.
  const int lock = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  RS_CHECK(lock >= 0, "--dump: cannot open ", d, ": ", std::strerror(errno));
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // and with it the lock
  } unlock{lock};
  for (int waited = 0; ::flock(lock, LOCK_EX | LOCK_NB) != 0; ++waited) {
    RS_CHECK(errno == EWOULDBLOCK && waited < 600, "--dump: ", d, " is locked by another dump (waited a minute)");
    ::usleep(100000);
  }
  const output::SignalsHeld held;
  const std::vector<std::string> written = dump_files(cfg);
  for (const std::string& f : written)
    if (::rename((staging / f).c_str(), (dir / f).c_str()) != 0)
      throw Error(detail::concat("--dump: cannot write ", (dir / f).string(), ": ", std::strerror(errno)));
  for (const std::string& f : stale_files(written, dir)) fs::remove(dir / f);
  return written.size() - 1;  // all but the manifest
}

}  // namespace ringside::cli
