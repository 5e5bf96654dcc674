// The viewer's colours: by kind of event, by rank and by memory category, told apart by people
// with the common colour-vision deficiencies (distances in CIELAB).
#include "viz/view_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace ringside::viz {

using trace::Event;

Color color_of_kind(trace::Kind kind) {
  // Communication in the Okabe-Ito hues; compute in lighter tones of others; waits grey.
  using trace::Kind;
  switch (kind) {
    case Kind::attention: return rgba(0x77, 0x99, 0xff);
    case Kind::gemm: return rgba(0x88, 0xee, 0xbb);
    case Kind::norm: return rgba(0xaa, 0x99, 0xbb);
    case Kind::elementwise: return rgba(0xff, 0xcc, 0x77);
    case Kind::memory: return rgba(0xaa, 0x66, 0x44);
    case Kind::wait: return rgba(90, 90, 90);
    case Kind::p2p: return rgba(0xe6, 0x9f, 0x00);             // orange
    case Kind::all_gather: return rgba(0xf0, 0xe4, 0x42);      // yellow
    case Kind::reduce_scatter: return rgba(0xcc, 0x79, 0xa7);  // reddish purple
    case Kind::all_reduce: return rgba(0x00, 0x72, 0xb2);      // blue
    case Kind::all_to_all: return rgba(0x56, 0xb4, 0xe9);      // sky blue
    case Kind::collective: return rgba(140, 110, 60);
    case Kind::phase: return rgba(70, 70, 80);
    case Kind::sublayer: return rgba(95, 95, 110);
    case Kind::ring_step: return rgba(60, 90, 130);
    case Kind::other: break;
  }
  return rgba(160, 160, 160);
}

const std::vector<trace::Kind>& compute_kinds() {
  using trace::Kind;
  static const std::vector<Kind> k{Kind::attention, Kind::gemm, Kind::norm, Kind::elementwise, Kind::memory, Kind::wait};
  return k;
}

const std::vector<trace::Kind>& comm_kinds() {
  using trace::Kind;
  static const std::vector<Kind> k{Kind::p2p, Kind::all_gather, Kind::reduce_scatter, Kind::all_reduce, Kind::all_to_all};
  return k;
}

namespace {

// CIELAB (D65) of an 8-bit sRGB colour, as seen with `v`.
std::array<double, 3> lab_of(Color c, Vision v) {
  auto linear = [](uint32_t byte) {
    const double x = double(byte & 0xff) / 255.0;
    return x <= 0.04045 ? x / 12.92 : std::pow((x + 0.055) / 1.055, 2.4);
  };
  std::array<double, 3> rgb{linear(c), linear(c >> 8), linear(c >> 16)};
  // Machado, Oliveira and Fernandes (2009), Table 1 at severity 1.0, on linear RGB.
  static const double kMachado[3][3][3] = {
      {{0.152286, 1.052583, -0.204868}, {0.114503, 0.786281, 0.099216}, {-0.003882, -0.048116, 1.051998}},   // protanopia
      {{0.367322, 0.860646, -0.227968}, {0.280085, 0.672501, 0.047413}, {-0.011820, 0.042940, 0.968881}},    // deuteranopia
      {{1.255528, -0.076749, -0.178779}, {-0.078411, 0.930809, 0.147602}, {0.004733, 0.691367, 0.303900}}};  // tritanopia
  if (v != Vision::normal) {
    const auto& m = kMachado[int(v) - 1];
    std::array<double, 3> out{};
    for (int i = 0; i < 3; ++i) out[i] = std::clamp(m[i][0] * rgb[0] + m[i][1] * rgb[1] + m[i][2] * rgb[2], 0.0, 1.0);
    rgb = out;
  }
  const double X = 0.4124564 * rgb[0] + 0.3575761 * rgb[1] + 0.1804375 * rgb[2];
  const double Y = 0.2126729 * rgb[0] + 0.7151522 * rgb[1] + 0.0721750 * rgb[2];
  const double Z = 0.0193339 * rgb[0] + 0.1191920 * rgb[1] + 0.9503041 * rgb[2];
  auto f = [](double t) { return t > 216.0 / 24389.0 ? std::cbrt(t) : (24389.0 / 27.0 * t + 16.0) / 116.0; };
  const double fx = f(X / 0.95047), fy = f(Y), fz = f(Z / 1.08883);
  return {116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)};
}

}  // namespace

double color_distance(Color a, Color b, Vision v) {
  const auto x = lab_of(a, v), y = lab_of(b, v);
  return std::hypot(x[0] - y[0], x[1] - y[1], x[2] - y[2]);
}

Color color_of(const Event& e) {
  // A modeled step's blocks (model/step_plan.h, step_timeline): a microbatch's forward or backward
  // of a chunk of layers, light and dark, as pipeline diagrams draw F and B.
  if (e.kind == trace::Kind::other && e.phase == "forward") return kStepForward;
  if (e.kind == trace::Kind::other && e.phase == "backward") return kStepBackward;
  return color_of_kind(e.kind == trace::Kind::collective ? trace::kind_of(e.name) : e.kind);
}

std::string row_name(const trace::RunInfo& run, int rank) { return row_unit(run) + " " + std::to_string(rank); }

Color rank_color(int r) {
  // Pastel hues: not to be confused with the event kinds' saturated colours.
  static const Color c[kRankColors] = {rgba(160, 196, 255), rgba(255, 173, 173), rgba(253, 255, 182), rgba(202, 255, 191),
                              rgba(189, 178, 255), rgba(155, 246, 255), rgba(255, 214, 165), rgba(255, 198, 255),
                              rgba(210, 210, 160), rgba(170, 220, 200), rgba(230, 190, 150), rgba(200, 200, 230)};
  return r < 0 ? rgba(200, 200, 200) : c[r % kRankColors];
}

std::string rank_color_key(int hue, int P) {
  std::vector<int> ranks;
  for (int r = hue; r < P; r += kRankColors) ranks.push_back(r);
  std::string key = "GPU";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks.size() > 6 && i == 3) {
      key += ", ..., " + std::to_string(ranks.back()) + ", every " + std::to_string(kRankColors) + "th";
      break;
    }
    key += (i ? ", " : " ") + std::to_string(ranks[i]);
  }
  return key;
}

Color memory_color(int category) {
  // Muted tones: a memory plot is not an event.
  static const Color c[kNumMemCategories] = {rgba(96, 110, 140), rgba(150, 120, 90), rgba(120, 170, 200),
                                             rgba(170, 150, 200), rgba(200, 170, 110)};
  return c[std::clamp(category, 0, kNumMemCategories - 1)];
}

}  // namespace ringside::viz
