// Files: the Open dialog (trace files, and folders of PyTorch profiler traces), files dropped on
// the window, live reload of a trace a run is writing, and the panel that says why a file could
// not be opened.
#include <algorithm>

#include "trace/kineto.h"
#include "viz/app.h"

namespace ringside::viz {

namespace fs = std::filesystem;

void App::poll_live() {
  if (opt_.live.empty()) return;
  std::error_code ec;
  const auto m = fs::last_write_time(opt_.live, ec);
  if (ec) return;
  for (Loaded& t : traces_)
    if (t.path == opt_.live && t.mtime != m) {
      try {
        t = load(opt_.live, opt_.align);
        ++generation_;
        arranged_ = false;
        fit();
        live_note_.clear();
      } catch (const std::exception& e) {
        t.mtime = m;  // try again at the next change
        live_note_ = std::string("waiting for a complete trace: ") + e.what();
      }
    }
  const bool have = std::any_of(traces_.begin(), traces_.end(), [&](const Loaded& t) { return t.path == opt_.live; });
  if (!have && fs::exists(opt_.live, ec)) {
    try {
      traces_.push_back(load(opt_.live, opt_.align));
      ++generation_;
      arranged_ = false;
      fit();
      live_note_.clear();
    } catch (const std::exception& e) {
      live_note_ = std::string("waiting for a complete trace: ") + e.what();
    }
  } else if (!have) {
    live_note_ = "waiting for " + opt_.live + " to appear";
  }
}

void App::file_dialog() {
  if (!dialog_open_) return;
  ImGui::SetNextWindowSize(ImVec2(520, 420), ImGuiCond_FirstUseEver);
  if (!ImGui::Begin("Open a trace", &dialog_open_)) {
    ImGui::End();
    return;
  }
  ImGui::TextUnformatted(dialog_dir_.c_str());
  // A folder of PyTorch profiler traces, one per rank, opens as one run.
  std::vector<std::string> ranks;
  try {
    ranks = trace::kineto_files(dialog_dir_);
  } catch (const std::exception&) {  // none here: an ordinary folder
  }
  if (!ranks.empty() && ImGui::Button(("Open this folder: " + std::to_string(ranks.size()) + " PyTorch profiler traces").c_str())) {
    open(dialog_dir_);
    fit();
    dialog_open_ = false;
  }
  std::error_code ec;
  if (ImGui::Selectable("..")) dialog_dir_ = fs::path(dialog_dir_).parent_path().string();
  std::vector<fs::directory_entry> entries;
  for (auto it = fs::directory_iterator(dialog_dir_, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) entries.push_back(*it);
  std::sort(entries.begin(), entries.end(), [](auto& a, auto& b) { return a.path().filename() < b.path().filename(); });
  for (const auto& e : entries) {
    const bool dir = e.is_directory(ec);
    const std::string name = e.path().filename().string() + (dir ? "/" : "");
    const std::string file = e.path().filename().string();
    if (!dir && !file.ends_with(".json") && !file.ends_with(".json.gz")) continue;
    if (ImGui::Selectable(name.c_str())) {
      if (dir) {
        dialog_dir_ = e.path().string();
      } else {
        open(e.path().string());
        fit();
        dialog_open_ = false;
      }
    }
  }
  ImGui::End();
}

void App::error_panel() {
  if (errors_.empty()) return;
  ImGui::SetNextWindowPos(ImVec2(40, 80), ImGuiCond_FirstUseEver);
  ImGui::Begin("Could not open", nullptr, ImGuiWindowFlags_AlwaysAutoResize);
  for (const std::string& e : errors_) ImGui::TextColored(ImVec4(1, 0.45f, 0.4f, 1), "%s", e.c_str());
  if (ImGui::Button("Dismiss")) errors_.clear();
  ImGui::End();
}

}  // namespace ringside::viz
