// `bench layer --peer pytorch`: the layers bench layer times, run again in PyTorch eager in the
// same run, so that "ahead of PyTorch" is measured, not remembered (issue 58).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "cli/peer_process.h"
#include "layer/config.h"

namespace ringside::cli {

/// src/cli/peer_pytorch.py, embedded at build time (CMakeLists.txt writes peer_pytorch_script.cpp
/// from it): the text ringside runs as `PYTHON -c`, so the two cannot drift apart.
extern const char* const kPeerPytorchScript;

/// One layer bench layer times, as the peer sees it: its row name ("gpt layer"), its config and
/// ringside's parameter count (the sum of its LayerWeights' elements).
struct PeerLayer {
  std::string name;
  LayerConfig cfg;
  int64_t ringside_params = 0;
};

/// The Python a peer runs: `python` when given (--python), else $RINGSIDE_PYTHON when set and not
/// empty, else "python3" on PATH.
std::string peer_python(const std::string& python);

/// Seconds the peer may take to answer (its ready line, a round): $RINGSIDE_PEER_TIMEOUT, default
/// 300. Throws ConfigError unless it is a number above 0 and up to 86400.
double peer_timeout_s();

/// One PyTorch eager process per layer (src/cli/peer_pytorch.py; its protocol is there): started
/// by the constructor, so that importing torch and its warm-up overlap ringside's own, ready by
/// wait_ready, then one round per round() call, the best forward and backward of each kept.
class PytorchPeers {
 public:
  /// Starts `python -c <kPeerPytorchScript> --config <cfg.to_json()>` per layer. Throws ConfigError,
  /// before starting any, for a layer the peer does not build (packed documents, a window) or a
  /// bad RINGSIDE_PEER_TIMEOUT, and when a Python named by --python or $RINGSIDE_PYTHON cannot run.
  PytorchPeers(const std::string& python, std::vector<PeerLayer> layers);
  ~PytorchPeers();

  /// Waits for every peer's first line. `ready` with ringside's parameter count: active() from
  /// then on. `skip <why>` (no torch), or python3 absent from PATH: prints "peer pytorch: skipped
  /// (why; ...)", ends them all, active() false. Throws ringside::Error naming the peer when it built a layer
  /// of another parameter count ("the PyTorch peer built a different layer: N parameters against
  /// ringside's M"), says anything else, ends, or does not answer in peer_timeout_s().
  void wait_ready();
  bool active() const { return !peers_.empty(); }
  /// One forward and backward of each peer, in layer order, the best of each kept. Throws
  /// ringside::Error naming the peer when its answer is not two times or does not come.
  void round();
  /// The rows after bench layer's table: a header naming torch, its CPU capability and threads,
  /// then per layer forward and backward, time, GFLOP/s (layer_forward_flops and
  /// layer_backward_flops, ringside's count) and ringside's time against PyTorch's ("ringside
  /// 1.31x faster", "ringside 0.80x (behind)"). `ringside_s`: per layer, ringside's best forward
  /// and backward seconds.
  void print(const std::vector<std::pair<double, double>>& ringside_s) const;

 private:
  struct Peer {
    PeerLayer layer;
    std::unique_ptr<PeerProcess> process;
    double forward_s = 1e300, backward_s = 1e300;
  };
  std::vector<Peer> peers_;
  std::string python_;
  bool python_given_;  // by --python or $RINGSIDE_PYTHON: one that cannot run is an error, not a skip
  std::string torch_version_, capability_, threads_;
  double timeout_s_;
  int rounds_ = 0;
  std::string answer(Peer& p, const char* awaited);
};

}  // namespace ringside::cli
