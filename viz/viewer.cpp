// ringside-viewer: replays ringside traces, and PyTorch profiler runs, with Dear ImGui (GLFW + OpenGL 3).
//
// This file is the program: its options, the window and the frame loop, and the headless
// screenshot. What it draws is the App (viz/app.h), one file per panel; what the App draws is
// computed in view_model.cpp, without a window, and unit-tested.
#include <sys/resource.h>
#include <GLFW/glfw3.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "imgui.h"
#include "imgui_impl_glfw.h"
#include "imgui_impl_opengl3.h"
#include "stb_image_write.h"
#include "core/strict_flags.h"
#include "core/output.h"
#include "core/memory_limits.h"
#include "trace/kineto.h"
#include "viz/app.h"

namespace ringside::viz {
namespace {

namespace fs = std::filesystem;

App* g_app = nullptr;

void on_drop(GLFWwindow*, int count, const char** paths) {
  if (g_app) g_app->drop(count, paths);
}

// The options' own rules, before any work: the window size (returned), the pairs that go
// together, and the outputs of a headless run (never an input, never each other, writable). A
// lesson without a file takes the lesson's trace.
std::pair<int, int> check_options(Options& o) {
  int w = 1600, h = 1000;
  char extra = 0;
  if (!std::regex_match(o.size, std::regex("[0-9]{1,5}x[0-9]{1,5}")) || std::sscanf(o.size.c_str(), "%dx%d%c", &w, &h, &extra) != 2 ||
      w < 200 || h < 150 || w > 8192 || h > 8192)
    throw ConfigError("--size " + o.size + ": expected WxH, each between 200 and 8192 pixels");
  const bool headless = o.screenshot_given;
  if (headless && o.screenshot.empty()) throw ConfigError("--screenshot needs a file name");
  if (o.at_s && o.step) throw ConfigError("--at and --step both place the play head: give one");
  if (!o.layout_json.empty() && !headless) throw ConfigError("--layout-json goes with --screenshot");
  if (o.lesson_step && !o.lesson) throw ConfigError("--lesson-step goes with --lesson");
  if (headless) {
    // The outputs, before any work: never an input, never each other, and writable.
    std::vector<output::Named> inputs{{"--live", o.live}};
    for (const std::string& f : trace::trace_input_files(o.files)) inputs.push_back({"", f});  // a folder's files too
    output::check_distinct({{"--screenshot", o.screenshot}, {"--layout-json", o.layout_json}}, inputs);
    output::check(o.screenshot, "--screenshot");
    if (!o.layout_json.empty()) output::check(o.layout_json, "--layout-json");
  }
  if (o.lesson) {
    if (o.files.size() > 1 || !o.live.empty()) throw ConfigError("--lesson shows one trace: give at most one file and no --live");
    lessons::find_lesson(*o.lesson);  // "there is no lesson 9: the lessons are 1 to 7"
    if (o.files.empty()) {
      const std::string path = lessons::default_trace_path(*o.lesson);
      if (!fs::exists(path))
        throw std::runtime_error("no trace for lesson " + std::to_string(*o.lesson) + " at " + path +
                                 ": run `ringside lesson " + std::to_string(*o.lesson) + "` first (in this directory)");
      o.files.push_back(path);
    }
  }
  return {w, h};
}

// The rendered frame, read back, as a PNG at o.screenshot (and the layout as JSON): encoded in
// memory, then written whole (core/output.h), never half a PNG. Returns the exit status.
int save_screenshot(const Options& o, const App& app, int fw, int fh) {
  std::vector<unsigned char> px(size_t(fw) * size_t(fh) * 4), flipped(px.size());
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, fw, fh, GL_RGBA, GL_UNSIGNED_BYTE, px.data());
  for (int y = 0; y < fh; ++y)
    std::copy_n(px.data() + size_t(fh - 1 - y) * size_t(fw) * 4, size_t(fw) * 4, flipped.data() + size_t(y) * size_t(fw) * 4);
  std::string png;
  const auto append = [](void* to, void* data, int size) { static_cast<std::string*>(to)->append(static_cast<char*>(data), size_t(size)); };
  try {
    if (!stbi_write_png_to_func(append, &png, fw, fh, 4, flipped.data(), fw * 4))
      throw std::runtime_error("--screenshot: cannot encode the PNG");
    output::write(o.screenshot, png, "--screenshot");
    if (!o.layout_json.empty()) output::write(o.layout_json, app.layout_json().dump(2) + "\n", "--layout-json");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringside-viewer: %s\n", e.what());
    return 1;
  }
  return 0;
}

int run(Options o) {
  const bool headless = o.screenshot_given;
  const auto [w, h] = check_options(o);
  App app(o);
  // A file that cannot be read: headless runs fail with the message; windows show it.
  if (headless && app.errors().empty() && app.any_trace() && !app.any_event()) {
    std::fprintf(stderr, "ringside-viewer: the trace holds no events to draw\n");
    return 1;
  }
  if (headless && (!app.errors().empty() || !app.any_trace())) {
    for (const std::string& e : app.errors()) std::fprintf(stderr, "ringside-viewer: %s\n", e.c_str());
    if (app.option_error()) return 2;  // the trace read, an option wrong
    if (app.errors().empty())
      std::fprintf(stderr, "ringside-viewer: %s\n",
                   o.live.empty() ? "--screenshot needs a trace file" : ("--live " + o.live + ": no such file yet").c_str());
    return 1;
  }
  // The OpenGL driver maps much beside the traces (Mesa's software renderer: about 700 MiB of
  // address space under Xvfb, measured) and crashes rather than fail when it cannot.
  require_memory(768.0 * (1 << 20), "the viewer's window and OpenGL driver", "", 0, 0);
  // Mesa's software renderer (llvmpipe, as under Xvfb) starts a thread per core and waits for
  // ever when one cannot start (ulimit -u): under a limit on processes it draws on this thread
  // alone (LP_NUM_THREADS=0), unless the caller chose otherwise.
  if (struct rlimit nproc {}; getrlimit(RLIMIT_NPROC, &nproc) == 0 && nproc.rlim_cur != RLIM_INFINITY)
    setenv("LP_NUM_THREADS", "0", 0);
  glfwSetErrorCallback([](int code, const char* what) { std::fprintf(stderr, "ringside-viewer: GLFW error %d: %s\n", code, what); });
  if (!glfwInit()) throw std::runtime_error("cannot initialise GLFW (is there a display? for headless use run under xvfb-run)");
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  if (headless) glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
  GLFWwindow* window = glfwCreateWindow(w, h, "ringside-viewer", nullptr, nullptr);
  if (!window) {
    glfwTerminate();
    throw std::runtime_error("cannot create an OpenGL 3.3 window");
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(1);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // no imgui.ini beside the user's files
  ImGui::StyleColorsDark();
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330");
  g_app = &app;
  glfwSetDropCallback(window, on_drop);
  int frames = 0, status = 0;
  auto last_poll = std::chrono::steady_clock::now();
  while (!glfwWindowShouldClose(window)) {
    glfwPollEvents();
    if (std::chrono::steady_clock::now() - last_poll > std::chrono::milliseconds(500)) app.poll_live(), last_poll = std::chrono::steady_clock::now();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::NewFrame();
    int fw = 0, fh = 0;
    glfwGetFramebufferSize(window, &fw, &fh);
    app.frame(float(fw), float(fh));
    ImGui::Render();
    glViewport(0, 0, fw, fh);
    const Color bg = kBackground;
    glClearColor(float(bg & 0xff) / 255.f, float(bg >> 8 & 0xff) / 255.f, float(bg >> 16 & 0xff) / 255.f, 1.f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    // Headless: the third frame has a settled layout (ImGui sizes windows and tables from the
    // frames before); read it back and stop.
    if (headless && ++frames == 3) {
      status = save_screenshot(o, app, fw, fh);
      break;
    }
    glfwSwapBuffers(window);
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return status;
}

}  // namespace
}  // namespace ringside::viz

int main(int argc, char** argv) {
  ringside::restart_within_limits(argv);  // OpenBLAS loads with the lessons' code
  ringside::viz::Options o;
  CLI::App cli{"ringside-viewer: replay ringside traces and PyTorch profiler runs (lanes per GPU, ring steps, overlap, memory per GPU)"};
  cli.add_option("files", o.files, "trace files (ringside compare/run --trace), or folders of PyTorch profiler traces (one "
                 "Kineto file per rank, .json or .json.gz); two or more are compared side by side");
  cli.add_option("--live", o.live, "show this trace and reload it whenever it changes (while a run writes it)")->option_text("FILE");
  cli.add_option("--screenshot", o.screenshot, "render once to this PNG and exit (headless: under xvfb-run)")
      ->option_text("PNG")
      ->each([&o](const std::string&) { o.screenshot_given = true; });
  cli.add_option("--size", o.size, "window or screenshot size")->capture_default_str()->option_text("WxH");
  cli.add_option("--fit", o.fit, "the first view frames these groups' layer (forward + backward) and scrolls to the first: all, "
                 "modeled (the GPU twins), measured, or one group's full name (a twin's is \"ring (modeled, a100-nvlink)\"); "
                 "with :forward or :backward, that phase alone (ring:backward)")
      ->capture_default_str()
      ->option_text("GROUPS[:PHASE]");
  std::string zoom;
  cli.add_option("--zoom", zoom, "the first view shows this time range after each group's start, with units: 0,150us or 1ms,2.5ms "
                 "(a bare number is seconds; negative: before the forward); overrides --fit's time range")
      ->option_text("START,END");
  bool collapse = false, expand = false;
  cli.add_flag("--collapse", collapse, "draw every group collapsed: one summary row per GPU (compute, exposed comm, idle) and one "
               "memory plot (by default groups collapse when they would not all fit the window)");
  cli.add_flag("--expand", expand, "draw every group in full, whatever the window's height");
  cli.add_option("--at", o.at_s, "replay: show the run up to this many seconds after each strategy's start")
      ->check([](const std::string& v) {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        return v.empty() || *end || !std::isfinite(x) || x < 0 || x > 1e6 ? std::string("must be a number of seconds in [0, 1e6]") : std::string();
      })
      ->option_text("SECONDS");
  cli.add_option("--step", o.step, "replay: show the run up to the start of ring step N (0: the first)")
      ->check(CLI::Range(0, 1 << 30))
      ->option_text("N");
  cli.add_option("--lesson", o.lesson, "step through lesson N beside its timeline (the trace `ringside lesson N` wrote, "
                 "out/lessons/NN-name.trace.json, unless a file is given)")
      ->check(CLI::Range(1, 1 << 30))
      ->option_text("N");
  cli.add_option("--lesson-step", o.lesson_step, "with --lesson: open at step K (1: the first)")
      ->check(CLI::Range(1, 1 << 30))
      ->option_text("K");
  // --align as ringside's commands have it (its values and help: trace/trace_file.h).
  std::string align = "auto";
  namespace trace = ringside::trace;
  cli.add_option("--align", align, trace::kClockAlignHelp)
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(trace::kClockAlignNames), std::end(trace::kClockAlignNames))))
      ->capture_default_str();
  cli.add_option("--layout-json", o.layout_json, "with --screenshot: also write where the lanes were drawn (tests)")->option_text("FILE");
  ringside::cli::strict_values(cli);
  try {
    ringside::cli::refuse_flag_values(cli, argc, argv);
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e) == 0 ? 0 : 2;  // --help is 0; a flag the parser refuses is a usage error
  }
  try {
    if (collapse && expand) throw ringside::ConfigError("--collapse and --expand contradict each other: give one");
    if (collapse) o.collapse = ringside::viz::Options::Collapse::all;
    if (expand) o.collapse = ringside::viz::Options::Collapse::none;
    if (!zoom.empty()) o.zoom = ringside::viz::parse_zoom(zoom);
    o.align = ringside::trace::clock_align_named(align);
    return ringside::viz::run(o);
  } catch (const ringside::ConfigError& e) {  // a bad option or output, before any work
    std::fprintf(stderr, "ringside-viewer: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringside-viewer: %s\n", e.what());
    return 1;
  }
}
