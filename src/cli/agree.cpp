// Under mpirun, every process is one rank of one job, started by its own command line. Before
// any other communication the ranks agree on two things, so that nothing leaves a rank waiting
// out --timeout for peers that have already given up:
//   1. the command: every option given, by name and value (an MPMD launch may differ);
//   2. the checks: a rank that finds its configuration bad (its machine's memory, an output
//      only rank 0 writes) says so, and every rank exits 2 with it.
#include <algorithm>
#include <chrono>
#include <map>

#include "cli/commands.h"
#include "comm/communicator.h"
#include "core/error.h"

namespace ringside::cli {

namespace {

// Every rank's string, gathered to every rank (lengths first, then the characters).
std::vector<std::string> all_gather_strings(Communicator& world, const std::string& mine) {
  const int P = world.size();
  const double length = double(mine.size());
  std::vector<double> lengths(P);
  world.all_gather(&length, lengths.data(), std::vector<int64_t>(P, 1), DType::f64);
  std::vector<int64_t> counts(P);
  int64_t total = 0;
  for (int r = 0; r < P; ++r) total += counts[r] = int64_t(lengths[r]);
  std::vector<double> chars(mine.begin(), mine.end()), all(size_t(std::max<int64_t>(total, 1)));
  world.all_gather(chars.data(), all.data(), counts, DType::f64);
  std::vector<std::string> out(P);
  size_t at = 0;
  for (int r = 0; r < P; ++r)
    for (int64_t i = 0; i < counts[r]; ++i) out[r].push_back(char(all[at++]));
  return out;
}

std::string encode(const std::string& command, const GivenOptions& given) {
  std::string s = command;
  for (const auto& [name, value] : given) s += "\n" + name + "\t" + value;
  return s;
}

std::map<std::string, std::string> decode(const std::string& s) {
  std::map<std::string, std::string> m;
  size_t at = 0;
  for (bool first = true; at <= s.size(); first = false) {
    const size_t end = std::min(s.find('\n', at), s.size());
    const std::string line = s.substr(at, end - at);
    if (first) m["(the subcommand)"] = line;
    else if (const size_t tab = line.find('\t'); tab != std::string::npos) m[line.substr(0, tab)] = line.substr(tab + 1);
    at = end + 1;
  }
  return m;
}

std::string as_given(const std::map<std::string, std::string>& m, const std::string& name) {
  const auto it = m.find(name);
  if (it == m.end()) return "no " + name;
  return name.starts_with("(") ? it->second : name + (it->second.empty() ? "" : " " + it->second);
}

}  // namespace

// Before the first collective, every rank shows rank 0 that it is there, and rank 0 answers.
// A process that joined MPI but never reaches ringside's first collective (another program, or
// stuck) is so named by rank 0 alone, exactly, instead of by each rank of a ring all-gather
// waiting on its neighbour, which names ranks that are there. Rank 0 waits --timeout; the
// others 5 s more, so that rank 0, which knows who is missing, speaks first and ends the job.
void check_ranks_arrive(Communicator& world) {
  const int P = world.size();
  if (P == 1) return;
  constexpr int kArrivalTag = (1 << 20) + 100;
  const auto deadline = deadline_in(world.timeout_s);
  if (world.rank() == 0) {
    std::vector<char> arrived(size_t(P), 0);
    std::vector<RequestPtr> arrivals(arrived.size());
    for (int r = 1; r < P; ++r) arrivals[size_t(r)] = world.irecv(&arrived[size_t(r)], 1, r, kArrivalTag, "arrival");
    std::string missing;
    int count = 0;
    for (int r = 1; r < P; ++r)
      if (!arrivals[size_t(r)]->wait_until(deadline)) missing += (count++ ? ", " : "") + std::to_string(r);
    if (count > 0)
      throw CommError(detail::concat(count == 1 ? "rank " : "ranks ", missing, count == 1 ? " has" : " have",
                                     " not reached the job's first collective within ", world.timeout_s,
                                     " s (--timeout): it joined MPI but runs another program, or is stuck"));
    const char go = 1;
    std::vector<RequestPtr> answers;
    for (int r = 1; r < P; ++r) answers.push_back(world.isend(&go, 1, r, kArrivalTag, "arrival"));
    world.wait_all(answers);
  } else {
    const char here = 1;
    char go = 0;
    RequestPtr sent = world.isend(&here, 1, 0, kArrivalTag, "arrival");
    RequestPtr answer = world.irecv(&go, 1, 0, kArrivalTag, "arrival");
    if (!answer->wait_until(deadline + std::chrono::seconds(5)))
      throw CommError(detail::concat("rank 0 has not answered within ", world.timeout_s + 5,
                                     " s (--timeout + 5): it joined MPI but runs another program, or is stuck"));
    world.wait(sent);
  }
}

void check_ranks_agree(Communicator& world, const std::string& command, const GivenOptions& given) {
  check_ranks_arrive(world);
  const std::vector<std::string> all = all_gather_strings(world, encode(command, given));
  for (int r = 1; r < world.size(); ++r) {
    if (all[r] == all[0]) continue;
    const auto mine = decode(all[r]), root = decode(all[0]);
    std::string name;  // the first option that differs
    for (const auto* m : {&root, &mine})
      for (const auto& [n, v] : *m)
        if (name.empty() && (!mine.count(n) || !root.count(n) || mine.at(n) != root.at(n))) name = n;
    throw ConfigError(detail::concat("the ranks disagree on the job: rank ", r, " was started with ", as_given(mine, name),
                                     " and rank 0 with ", as_given(root, name), " (every rank must run the same command)"));
  }
}

void checked_on_every_rank(Communicator* world, const std::function<void()>& checks) {
  std::string error;
  try {
    checks();
  } catch (const ConfigError& e) {
    if (!world) throw;
    error = e.what();
  }
  if (!world) return;
  const int P = world->size();
  const double failed = error.empty() ? 0 : 1;
  std::vector<double> all(P);
  world->all_gather(&failed, all.data(), std::vector<int64_t>(P, 1), DType::f64);
  const auto first = std::find(all.begin(), all.end(), 1.0);
  if (first == all.end()) return;
  const int reporter = int(first - all.begin());
  // The lowest rank that found a problem says it; the others exit as quietly, with it.
  throw ConfigError(reporter == 0 ? error : detail::concat("rank ", reporter, ": ", error), reporter);
}

}  // namespace ringside::cli
