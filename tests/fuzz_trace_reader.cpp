// libFuzzer target: the trace reader, the metrics and the writer on arbitrary bytes. The only
// acceptable outcomes are a parsed trace or a ringside::Error; anything else (a crash, another
// exception, a sanitizer report, a hang) is a bug. Built with clang, ASan and UBSan; CTest runs
// it for a bounded time from tests/fuzz_seed (tests/CMakeLists.txt).
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "trace/metrics.h"
#include "trace/trace_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto t = ringside::trace::parse_trace(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    ringside::trace::compute_metrics(t);
    (void)ringside::trace::to_chrome_json(t).dump();
  } catch (const ringside::Error&) {
  }
  return 0;
}
