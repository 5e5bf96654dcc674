// core/: Tensor, MemoryTracker, npy.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/npy.h"
#include "core/tensor.h"

using namespace ringside;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir() {
  fs::path p = fs::temp_directory_path() / ("ringside_test_core_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}
}  // namespace

TEST_CASE("Tensor shape and bytes and dtype checks and conversion", "[core][tensor]") {
  MemoryTracker tr;
  Tensor t = Tensor::zeros({2, 3, 4}, DType::f32, {1, MemCategory::workspace, &tr});
  REQUIRE(t.numel() == 24);
  REQUIRE(t.nbytes() == 96);
  REQUIRE(t.dim(-1) == 4);
  REQUIRE_THROWS_WITH(t.data<double>(), Catch::Contains("f64 data of a f32 tensor"));
  REQUIRE_THROWS_WITH(t.reshape({5, 5}), Catch::Contains("cannot reshape"));
  REQUIRE_THROWS_WITH(Tensor::empty({2, -1}, DType::f32, {}), Catch::Contains("negative"));
  REQUIRE_THROWS_WITH(Tensor::empty({2}, DType::f32, {}, Device::cuda), Catch::Contains("CUDA"));
  for (int i = 0; i < 24; ++i) t.data<float>()[i] = 0.1f * float(i);
  Tensor d = t.to(DType::f64, {1, MemCategory::workspace, &tr});
  REQUIRE(d.data<double>()[7] == double(0.7f));
  REQUIRE(relative_error(t, d) == 0);
  Tensor r = t.reshape({6, 4});  // a view: same storage
  r.data<float>()[0] = 5;
  REQUIRE(t.data<float>()[0] == 5);
  REQUIRE(tr.live(1, MemCategory::workspace) == 96 + 192);
}

TEST_CASE("relative_error is the relative Frobenius norm", "[core][tensor]") {
  Tensor a = Tensor::zeros({2}, DType::f64, {}), b = Tensor::zeros({2}, DType::f64, {});
  a.data<double>()[0] = 3, a.data<double>()[1] = 4;
  b.data<double>()[0] = 3, b.data<double>()[1] = 4.5;
  REQUIRE(relative_error(b, a) == Approx(0.5 / 5.0));
  REQUIRE(relative_error(Tensor::zeros({2}, DType::f64, {}), Tensor::zeros({2}, DType::f64, {})) == 0);
}

TEST_CASE("MemoryTracker keeps live and peak bytes per rank and category", "[core][memory]") {
  MemoryTracker tr;
  {
    Tensor a = Tensor::empty({100}, DType::f32, {0, MemCategory::activations, &tr});
    {
      Tensor b = Tensor::empty({50}, DType::f64, {0, MemCategory::activations, &tr});
      Tensor c = Tensor::empty({10}, DType::f32, {2, MemCategory::comm, &tr});
      REQUIRE(tr.live(0, MemCategory::activations) == 800);
      REQUIRE(tr.live(2, MemCategory::comm) == 40);
    }
    REQUIRE(tr.live(0, MemCategory::activations) == 400);
    REQUIRE(tr.peak(0, MemCategory::activations) == 800);
    Tensor w = Tensor::empty({25}, DType::f32, {0, MemCategory::weights, &tr});
    REQUIRE(tr.stats(0).peak_total == 800);
    REQUIRE(tr.stats(0).live_total == 500);
    tr.reset_peaks();
    REQUIRE(tr.peak(0, MemCategory::activations) == 400);
  }
  REQUIRE(tr.stats(0).live_total == 0);
  REQUIRE(tr.all().size() == 2);
  REQUIRE_THROWS_WITH(tr.on_free(5, MemCategory::grads, 8), Catch::Contains("rank 5"));
}

TEST_CASE("MemoryTracker is exact under concurrent ranks", "[core][memory]") {
  MemoryTracker tr;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.emplace_back([&tr, r] {
      for (int i = 0; i < 2000; ++i) Tensor t = Tensor::empty({r + 1}, DType::f64, {r, MemCategory::workspace, &tr});
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 4; ++r) {
    REQUIRE(tr.live(r, MemCategory::workspace) == 0);
    REQUIRE(tr.peak(r, MemCategory::workspace) == 8 * (r + 1));
  }
}

TEST_CASE("npy round trip for f32 and f64 of any rank", "[core][npy]") {
  const fs::path dir = temp_dir();
  for (DType dt : {DType::f32, DType::f64})
    for (const Shape& shape : {Shape{}, Shape{7}, Shape{2, 3}, Shape{2, 3, 5}, Shape{0, 4}}) {
      Tensor t = Tensor::empty(shape, dt, {});
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (dt == DType::f32) t.data<float>()[i] = 0.5f * float(i) - 1;
        else t.data<double>()[i] = 1.0 / double(i + 1);
      }
      const std::string path = (dir / "t.npy").string();
      write_npy(path, t);
      // NumPy's layout: magic, version, header length, header padded so data starts at 64k.
      REQUIRE(fs::file_size(path) % 64 == uint64_t(t.nbytes()) % 64);
      Tensor back = read_npy(path);
      REQUIRE(back.shape() == shape);
      REQUIRE(back.dtype() == dt);
      REQUIRE(relative_error(back, t) == 0);
    }
  fs::remove_all(dir);
}

TEST_CASE("npy header text is what NumPy writes", "[core][npy]") {
  const fs::path dir = temp_dir();
  const std::string path = (dir / "h.npy").string();
  write_npy(path, Tensor::zeros({3, 4}, DType::f32, {}));
  auto header = [&] {
    std::ifstream f(path, std::ios::binary);
    std::string head(10, '\0');
    f.read(head.data(), 10);
    const size_t len = static_cast<unsigned char>(head[8]) | (static_cast<unsigned char>(head[9]) << 8);
    head.resize(10 + len);
    f.read(head.data() + 10, static_cast<std::streamsize>(len));
    return head;
  };
  std::string head = header();
  REQUIRE(head.substr(1, 5) == "NUMPY");
  REQUIRE(head[6] == 1);
  REQUIRE(head.find("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }") == 10);
  REQUIRE(head.size() % 64 == 0);  // data starts on a 64-byte boundary
  REQUIRE(head.back() == '\n');
  write_npy(path, Tensor::zeros({5}, DType::f64, {}));
  REQUIRE(header().find("'shape': (5,)") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("npy reader rejects bad files with the reason", "[core][npy]") {
  const fs::path dir = temp_dir();
  auto write_raw = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  };
  auto npy = [](const std::string& dict, const std::string& data) {
    std::string header = dict;
    while ((10 + header.size() + 1) % 64) header += ' ';
    header += '\n';
    std::string s = "\x93NUMPY";
    s += char(1);
    s += char(0);
    s += char(header.size() & 0xff);
    s += char(header.size() >> 8);
    return s + header + data;
  };
  REQUIRE_THROWS_WITH(read_npy((dir / "missing.npy").string()), Catch::Contains("cannot open"));
  REQUIRE_THROWS_WITH(read_npy(write_raw("a", "hello world, not npy")), Catch::Contains("bad magic"));
  REQUIRE_THROWS_WITH(read_npy(write_raw("b", npy("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", "12345678"))),
                      Catch::Contains("unsupported dtype '<i4'"));
  REQUIRE_THROWS_WITH(read_npy(write_raw("c", npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", "12345678"))),
                      Catch::Contains("Fortran"));
  REQUIRE_THROWS_WITH(read_npy(write_raw("d", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", "1234"))),
                      Catch::Contains("truncated data"));
  REQUIRE_THROWS_WITH(read_npy(write_raw("e", npy("{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }", "12345678"))),
                      Catch::Contains("unsupported dtype '>f8'"));
  REQUIRE_THROWS_WITH(read_npy(write_raw("f", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", "12345678"))),
                      Catch::Contains("malformed shape"));
  REQUIRE_THROWS_WITH(read_npy(write_raw("g", std::string("\x93NUMPY\x01\x00\xff", 9))), Catch::Contains("truncated"));
  // Version 2.0 (4-byte header length) reads too.
  std::string v2 = npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0'));
  v2[6] = 2;
  v2.insert(10, std::string(2, '\0'));
  REQUIRE(read_npy(write_raw("h", v2)).shape() == Shape{1});
  fs::remove_all(dir);
}
