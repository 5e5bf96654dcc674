// Reading Kineto's words: names lowercased and searched, the element types its ops and
// collectives name ("c10::BFloat16", "Float"), and what a communication's name says it is. Internal to trace/ (the Kineto reader and the
// kernel samples of `ringside calibrate`).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "trace/trace.h"

namespace ringside::trace {

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}
inline bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// Bytes of one element of a dtype as Kineto writes it: "float", "c10::BFloat16" (an op's
// "Input type"), "Float", "BFloat16" (a collective's "dtype"); 0 for one not known.
inline int64_t dtype_bytes(std::string_view dtype) {
  std::string t = lower(dtype);
  if (t.starts_with("c10::")) t = t.substr(5);
  if (t.starts_with("torch.")) t = t.substr(6);
  if (t == "double" || t == "float64" || t == "long" || t == "long int" || t == "int64" || t == "complexfloat" ||
      t == "complex<float>" || t == "unsigned long")
    return 8;
  if (t == "float" || t == "float32" || t == "int" || t == "int32" || t == "unsigned int") return 4;
  if (t == "complex<double>" || t == "complexdouble") return 16;
  if (t == "complex<c10::half>" || t == "complexhalf") return 4;
  if (t == "half" || t == "float16" || t == "bfloat16" || t == "short" || t == "short int" || t == "int16" ||
      t == "unsigned short" || t == "uint16")
    return 2;
  if (t == "bool" || t == "char" || t == "signed char" || t == "unsigned char" || t == "byte" || t == "int8" ||
      t == "uint8" || t.starts_with("float8"))
    return 1;
  return 0;
}

// What a communication's name ("gloo:send", "c10d::allreduce_", "ncclDevKernel_SendRecv",
// record_param_comms' "Collective name") says it is: a transfer kind (Kind::other for a
// collective ringside has no kind for: broadcast, barrier, ...) and a side.
inline std::pair<Kind, Direction> comm_kind(std::string_view name) {
  const std::string n = lower(name);
  if (contains(n, "sendrecv")) return {Kind::p2p, Direction::none};
  if (contains(n, "all_reduce") || contains(n, "allreduce")) return {Kind::all_reduce, Direction::none};
  if (contains(n, "all_gather") || contains(n, "allgather")) return {Kind::all_gather, Direction::none};
  if (contains(n, "reduce_scatter") || contains(n, "reducescatter")) return {Kind::reduce_scatter, Direction::none};
  if (contains(n, "all_to_all") || contains(n, "alltoall")) return {Kind::all_to_all, Direction::none};
  if (contains(n, "send")) return {Kind::p2p, Direction::send};
  if (contains(n, "recv")) return {Kind::p2p, Direction::recv};
  return {Kind::other, Direction::none};
}

}  // namespace ringside::trace
