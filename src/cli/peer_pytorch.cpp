#include "cli/peer_pytorch.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <tuple>

#include "cli/format.h"
#include "core/error.h"
#include "layer/reference.h"

namespace ringside::cli {

std::string peer_python(const std::string& python) {
  if (!python.empty()) return python;
  const char* env = std::getenv("RINGSIDE_PYTHON");
  return env && *env ? env : "python3";
}

double peer_timeout_s() {
  const char* env = std::getenv("RINGSIDE_PEER_TIMEOUT");
  if (!env) return 300;
  char* end = nullptr;
  const double s = std::strtod(env, &end);
  // Seconds as decimals: strtod alone would take " 2", "0x10" or "1e1".
  const bool decimal = std::strspn(env, "0123456789.") == std::strlen(env);
  if (!*env || *end || !decimal || !(s > 0 && s <= 86400))
    throw ConfigError(detail::concat("RINGSIDE_PEER_TIMEOUT='", detail::shown_input(env),
                                     "' must be the seconds to wait for the PyTorch peer's answer, above 0 and up to 86400"));
  return s;
}

PytorchPeers::PytorchPeers(const std::string& python, std::vector<PeerLayer> layers)
    : python_(peer_python(python)), python_given_(python_ != "python3" || !python.empty()), timeout_s_(peer_timeout_s()) {
  for (const PeerLayer& l : layers)
    if (l.cfg.masked())
      throw ConfigError("--peer pytorch: the PyTorch peer runs one causal (or full) sequence: it builds no packed "
                        "documents (--docs) or sliding window (--window)");
  for (PeerLayer& l : layers) {
    Peer p{std::move(l), nullptr};
    p.process = std::make_unique<PeerProcess>(
        "peer pytorch (" + p.layer.name + ")",
        std::vector<std::string>{python_, "-c", kPeerPytorchScript, "--config", p.layer.cfg.to_json().dump()});
    // A Python the user named that cannot run is their error, before any work; python3 absent
    // from PATH is a skip (wait_ready).
    if (!p.process->running() && python_given_)
      throw ConfigError(detail::concat("--peer pytorch: ", p.process->why_not()));
    peers_.push_back(std::move(p));
  }
}

PytorchPeers::~PytorchPeers() {
  for (Peer& p : peers_)
    if (p.process->running()) {
      try {
        p.process->send_line("quit");
      } catch (const Error&) {  // gone already: the destructor reaps it
      }
    }
}

std::string PytorchPeers::answer(Peer& p, const char* awaited) {
  std::optional<std::string> line = p.process->read_line(timeout_s_);
  if (!line)
    throw Error(detail::concat(p.process->name(), ": it ", p.process->exit_description(), " before ", awaited,
                               " (anything it wrote to stderr is above)"));
  return *line;
}

void PytorchPeers::wait_ready() {
  auto skip = [&](const std::string& why) {
    std::printf("  peer pytorch: skipped (%s; --python or RINGSIDE_PYTHON names a Python with torch)\n",
                detail::shown_input(why, 200).c_str());
    std::fflush(stdout);
    peers_.clear();  // each ends: stdin closed, then killed if need be
  };
  for (Peer& p : peers_) {
    if (!p.process->running()) return skip(p.process->why_not());
    const std::string line = answer(p, "saying ready");
    if (line.rfind("skip ", 0) == 0) return skip(line.substr(5));
    std::istringstream in(line);
    std::string word, version, capability, threads, extra;
    int64_t params = -1;
    if (!(in >> word >> params >> version >> capability >> threads) || word != "ready" || (in >> extra))
      throw Error(detail::concat(p.process->name(), ": expected 'ready <parameter count> <torch version> <cpu capability> "
                                 "<threads>' or 'skip <why>', got '", detail::shown_input(line, 120), "'"));
    if (params != p.layer.ringside_params)
      throw Error(detail::concat(p.process->name(), ": the PyTorch peer built a different layer: ", params,
                                 " parameters against ringside's ", p.layer.ringside_params));
    torch_version_ = version, capability_ = capability, threads_ = threads;
  }
}

void PytorchPeers::round() {
  for (Peer& p : peers_) {  // one at a time: the others wait on their stdin
    p.process->send_line("round");
    const std::string line = answer(p, "answering a round");
    double forward = 0, backward = 0;
    char tail = 0;
    if (std::sscanf(line.c_str(), "%lf %lf %c", &forward, &backward, &tail) != 2 || !(forward > 0 && backward > 0) ||
        !std::isfinite(forward + backward))
      throw Error(detail::concat(p.process->name(), ": expected '<forward seconds> <backward seconds>' for a round, got '",
                                 detail::shown_input(line, 120), "'"));
    p.forward_s = std::min(p.forward_s, forward), p.backward_s = std::min(p.backward_s, backward);
  }
  ++rounds_;
}

void PytorchPeers::print(const std::vector<std::pair<double, double>>& ringside_s) const {
  if (!active()) return;
  RS_CHECK(ringside_s.size() == peers_.size(), "PytorchPeers::print: ", ringside_s.size(), " layers' times for ",
           peers_.size(), " peers");
  std::printf("\n  PyTorch eager %s (CPU capability %s, %s thread%s), the same layers in the same rounds, best of %d\n",
              torch_version_.c_str(), capability_.c_str(), threads_.c_str(), threads_ == "1" ? "" : "s", rounds_);
  std::printf("  %-34s %12s %16s   %s\n", "", "time", "throughput", "ringside / pytorch");
  for (size_t i = 0; i < peers_.size(); ++i) {
    const Peer& p = peers_[i];
    for (const auto& [dir, flops, time, ours] :
         {std::tuple{"forward", layer_forward_flops(p.layer.cfg), p.forward_s, ringside_s[i].first},
          std::tuple{"backward", layer_backward_flops(p.layer.cfg), p.backward_s, ringside_s[i].second}}) {
      // PyTorch's time over ringside's: how many times faster ringside ran, to the two digits shown.
      const double speedup = std::round(time / ours * 100) / 100;
      char verdict[64];
      std::snprintf(verdict, sizeof verdict,
                    speedup > 1 ? "ringside %.2fx faster" : speedup == 1 ? "ringside %.2fx (even)" : "ringside %.2fx (behind)", speedup);
      const std::string row = "pytorch eager " + p.layer.name + " " + dir;
      std::printf("  %-34s %12s %16s   %s\n", row.c_str(), format_seconds(time).c_str(), format_flops(flops / time).c_str(),
                  verdict);
    }
  }
}

}  // namespace ringside::cli
