// core/output.h: outputs never replace what is not a regular file, never leave half a file,
// never collide between writers, and are told apart by what they name, not how it is spelt.
// core/json_input.h: no input nests deep enough to recurse a reader off its stack.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/json_input.h"
#include "core/output.h"

using namespace ringside;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test case.
fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("ringside_test_output_" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The files of dir other than `keep`: leftovers (a temporary that was not removed).
std::vector<std::string> others(const fs::path& dir, const std::string& keep) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != keep) names.push_back(e.path().filename().string());
  return names;
}

bool is_char_device(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

}  // namespace

TEST_CASE("output: a regular file is replaced whole, with its mode, and no temporary is left", "[output]") {
  const fs::path dir = scratch("regular");
  const std::string f = (dir / "out.json").string();
  output::check(f, "--json");
  REQUIRE(!fs::exists(f));  // the check creates nothing
  REQUIRE(others(dir, "").empty());
  output::write(f, "first\n", "--json");
  REQUIRE(read(f) == "first\n");
  ::chmod(f.c_str(), 0640);
  output::write(f, "second, longer\n", "--json");
  REQUIRE(read(f) == "second, longer\n");
  struct stat st {};
  REQUIRE(::stat(f.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  CHECK(others(dir, "out.json").empty());
  // Through a symlink: the file it points to is replaced, the link stays.
  const fs::path link = dir / "link.json";
  fs::create_symlink(f, link);
  output::write(link.string(), "third\n", "--json");
  CHECK(fs::is_symlink(link));
  CHECK(read(f) == "third\n");
}

TEST_CASE("output: a regular file under /dev is a file like any other, an open file's name is written through",
          "[output]") {
  if (fs::is_directory("/dev/shm")) {
    const std::string f = "/dev/shm/ringside_test_output_" + std::to_string(::getpid()) + ".json";
    output::write(f, "first\n", "--trace");
    output::write(f, "second\n", "--trace");  // replaced, not appended
    CHECK(read(f) == "second\n");
    fs::remove(f);
  }
  // /proc/self/fd/N of a regular file: appended through the open file, which stays the same file.
  const fs::path dir = scratch("open-file");
  const fs::path f = dir / "log.txt";
  std::ofstream(f) << "kept\n";
  const int fd = ::open(f.c_str(), O_WRONLY | O_APPEND);
  REQUIRE(fd >= 0);
  struct stat before {}, after {};
  ::fstat(fd, &before);
  output::write("/proc/self/fd/" + std::to_string(fd), "added\n", "--json");
  ::stat(f.c_str(), &after);
  ::close(fd);
  CHECK(before.st_ino == after.st_ino);
  CHECK(read(f) == "kept\nadded\n");
}

TEST_CASE("output: a character device is written through, never replaced", "[output]") {
  const fs::path dir = scratch("chardev");
  const fs::path dev = dir / "null";
  // A null device of our own (mknod needs root); else the system's /dev/null.
  const fs::path target = ::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0 ? dev : fs::path("/dev/null");
  INFO("target " << target);
  REQUIRE(is_char_device(target));
  output::check(target.string(), "--trace");
  CHECK(!output::written_through((dir / "x").string()));
  CHECK(output::written_through(target.string()));
  output::write(target.string(), std::string(1 << 20, 'x'), "--trace");
  CHECK(is_char_device(target));  // still the device, not a regular file holding the text
  CHECK(others(dir, "null").empty());
}

TEST_CASE("output: a FIFO is written through, and checking it does not wait for a reader", "[output]") {
  const fs::path dir = scratch("fifo");
  const fs::path fifo = dir / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // No reader yet: the check must return at once (opening a FIFO would block for ever: the
  // bound is 2 minutes, so that no load can pass it, only a block).
  auto checked = std::async(std::launch::async, [&] { output::check(fifo.string(), "--json"); });
  REQUIRE(checked.wait_for(std::chrono::seconds(120)) == std::future_status::ready);
  checked.get();
  // The reader comes later; the writer waits for it, as a shell redirection would.
  auto reader = std::async(std::launch::async, [&] { return read(fifo); });
  output::write(fifo.string(), "{\"through\": true}\n", "--json");
  CHECK(reader.get() == "{\"through\": true}\n");
  struct stat st {};
  REQUIRE(::stat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
}

TEST_CASE("output: a directory, a socket or a missing directory is refused before any work", "[output]") {
  const fs::path dir = scratch("refused");
  const fs::path sub = dir / "sub";
  fs::create_directories(sub / "inner");
  REQUIRE_THROWS_MATCHES(output::check(sub.string(), "--trace"), ConfigError,
                         Catch::Message("--trace: cannot write " + sub.string() +
                                        ": it is a directory (ringside writes regular files, and through character "
                                        "devices and pipes)"));
  REQUIRE_THROWS_WITH(output::write(sub.string(), "x", "--trace"), Catch::Contains("it is a directory"));
  CHECK(fs::is_directory(sub / "inner"));  // untouched

  const fs::path sock = dir / "sock";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE_THROWS_WITH(output::check(sock.string(), "--json"), Catch::Contains("it is a socket"));
  ::close(fd);

  REQUIRE_THROWS_WITH(output::check((dir / "no" / "x.json").string(), "--json"),
                      Catch::Contains("the directory " + (dir / "no").string() + " does not exist"));
  REQUIRE_THROWS_WITH(output::check("", "--json"), Catch::Contains("--json needs a file name"));
}

TEST_CASE("output: the name checked is the name written, up to the file system's limit", "[output]") {
  const fs::path dir = scratch("names");
  // 253 characters: the final name fits; the temporary (NAME.XXXXXX.partial) is cut to fit too.
  const std::string long_name(253, 'n');
  const std::string f = (dir / long_name).string();
  output::check(f, "--trace");
  output::write(f, "whole\n", "--trace");
  CHECK(read(f) == "whole\n");
  CHECK(others(dir, long_name).empty());
  // 256 characters cannot be a name at all: refused by the check, with the reason.
  REQUIRE_THROWS_WITH(output::check((dir / std::string(256, 'n')).string(), "--trace"), Catch::EndsWith(": File name too long"));
}

TEST_CASE("output: a write that fails partway leaves the old file whole and no temporary", "[output]") {
  const fs::path dir = scratch("failing");
  const std::string f = (dir / "t.json").string();
  output::write(f, "the good one\n", "--trace");
  // A failure inside the writer (an exception while producing the content).
  REQUIRE_THROWS_WITH(output::write_with(
                          f,
                          [](std::ostream& os) {
                            os << std::string(1 << 20, 'y');
                            throw Error("produced halfway");
                          },
                          "--trace"),
                      "produced halfway");
  CHECK(read(f) == "the good one\n");
  CHECK(others(dir, "t.json").empty());
  // A file-size limit (ulimit -f): the write fails with EFBIG, in a child process whose limit
  // does not touch this one. It must throw, and the old file must survive untouched.
  const pid_t child = ::fork();
  if (child == 0) {
    struct rlimit l {64 * 1024, 64 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &l);
    try {
      output::write(f, std::string(1 << 20, 'z'), "--trace");
    } catch (const Error& e) {
      ::_exit(std::string(e.what()).find("File too large") != std::string::npos ? 0 : 2);
    }
    ::_exit(1);  // no error: the limit was not seen
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO("child: 0 = threw 'File too large', 1 = did not throw, 2 = another error, signal = killed by SIGXFSZ");
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(read(f) == "the good one\n");
  CHECK(others(dir, "t.json").empty());
}

TEST_CASE("output: concurrent writers of one name each rename a whole file of their own", "[output]") {
  const fs::path dir = scratch("concurrent");
  const std::string f = (dir / "t.json").string();
  const std::string a(300000, 'a'), b(200000, 'b');
  auto writer = [&](const std::string& text) {
    for (int i = 0; i < 50; ++i) output::write(f, text, "--trace");
  };
  std::thread ta(writer, a), tb(writer, b);
  // Meanwhile the file is always one writer's whole text, never a mixture or a part.
  for (int i = 0; i < 200; ++i) {
    if (!fs::exists(f)) continue;
    const std::string now = read(f);
    REQUIRE((now == a || now == b));
  }
  ta.join();
  tb.join();
  const std::string last = read(f);
  CHECK((last == a || last == b));
  CHECK(others(dir, "t.json").empty());
}

TEST_CASE("output: outputs and inputs are compared by what they name, not how it is spelt", "[output]") {
  const fs::path dir = scratch("aliases");
  const fs::path sub = dir / "sub";
  fs::create_directories(sub);
  const std::string x = (dir / "x.json").string();
  const std::string dotted = (dir / "." / "x.json").string(), up = (sub / ".." / "x.json").string();
  // Neither exists yet: resolved paths.
  CHECK(output::same_file(x, dotted));
  CHECK(output::same_file(x, up));
  CHECK(!output::same_file(x, (dir / "y.json").string()));
  REQUIRE_THROWS_MATCHES(output::check_distinct({{"--json", x}, {"--trace", up}}), ConfigError,
                         Catch::Message("--json " + x + " and --trace " + up + " name the same file: give each its own"));
  // Both exist: file identity, through a symlink and a hard link too.
  std::ofstream(x) << "{}";
  fs::create_symlink(x, dir / "sym.json");
  fs::create_hard_link(x, dir / "hard.json");
  CHECK(output::same_file(x, (dir / "sym.json").string()));
  CHECK(output::same_file((dir / "hard.json").string(), up));
  REQUIRE_THROWS_WITH(output::check_distinct({{"--json", (dir / "hard.json").string()}}, {{"", dotted}}),
                      Catch::Contains("would replace the input " + dotted));
  // Outputs written through may coincide (--json /dev/null --trace /dev/null).
  output::check_distinct({{"--json", "/dev/null"}, {"--trace", "/dev/null"}});
  output::check_distinct({{"--json", x}, {"--trace", ""}});
}

TEST_CASE("json_input: nesting past the bound is an error, not a stack overflow", "[output][json]") {
  const auto nested = [](int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); };
  CHECK(parse_json(nested(kMaxJsonNesting), "ok").is_array());
  REQUIRE_THROWS_MATCHES(parse_json(nested(kMaxJsonNesting + 1), "deep.json"), Error,
                         Catch::Message("deep.json: JSON nested more than 64 levels deep (at byte 64)"));
  // A million levels: the bound is found by a scan, before any recursion.
  REQUIRE_THROWS_WITH(parse_json("{\"a\":" + nested(1000000) + "}", "deeper.json"), Catch::Contains("nested more than 64"));
  // Brackets inside strings (with escaped quotes) are not nesting.
  CHECK(parse_json("{\"s\": \"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"}", "s").is_object());
  REQUIRE_THROWS_WITH(parse_json("{\"a\": [1, 2", "cut.json"), Catch::StartsWith("cut.json: not valid JSON (truncated or corrupt?): "));
}
