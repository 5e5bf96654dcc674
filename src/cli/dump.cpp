// The --dump format shared by `reference` and `run`: .npy files and a manifest.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/output.h"
#include "core/npy.h"
#include "device/backend.h"
#include "kernels/philox.h"

namespace ringside::cli {

void prepare_dump_dir(const std::string& d) {
  const std::filesystem::path dir = d;
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    throw ConfigError("--dump: " + d + " is not a directory (it holds a manifest and a .npy file per tensor)");
  std::filesystem::create_directories(dir, ec);
  if (ec) throw ConfigError("--dump: cannot create directory " + d + ": " + ec.message());
  // Each file is written through a temporary beside it (core/output.h): prove one can be made.
  output::check((dir / "manifest.json").string(), "--dump");
}

void write_dump(const std::string& d, const LayerConfig& cfg, const Tensor& out, const Tensor& dx,
                const LayerWeights& grads, const std::string& producer) {
  const std::filesystem::path dir = d;
  std::filesystem::create_directories(dir);
  nlohmann::json manifest;
  manifest["ringside_version"] = RINGSIDE_VERSION;
  manifest["producer"] = producer;
  manifest["config"] = cfg.to_json();
  manifest["dtype"] = "float32";
  manifest["order"] = "C";
  auto& files = manifest["tensors"];
  auto write = [&](const std::string& name, const Tensor& t) {
    const std::string file = name + ".npy";
    write_npy((dir / file).string(), t.dtype() == DType::f32 ? t : t.to(DType::f32, {}));
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
  // Last, so that a manifest names only files written whole.
  output::write((dir / "manifest.json").string(), manifest.dump(2) + "\n", "--dump");
}

}  // namespace ringside::cli
