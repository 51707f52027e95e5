// `boostlm plot RUN... -o FILE.png|svg`: a run's curves from its metrics.jsonl, drawn by gnuplot
// (one panel each for the training and validation loss, the learning rate and tokens/s; several
// runs overlaid), for people without TensorBoard. scripts/results_report.py draws its loss curves
// with it too.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"

extern char** environ;

namespace boostlm::cli {

namespace {

namespace fs = std::filesystem;

struct PlotOptions {
  std::vector<std::string> runs;  // run directories or metrics.jsonl files
  std::vector<std::string> labels;
  std::string out;
  std::string title;
  std::string panels = "loss,lr,tokens_per_s";
  int64_t smooth = 1;  // steps averaged in the training loss
};

struct RunCurves {
  std::string label;
  std::vector<nlohmann::json> lines;  // metrics.jsonl's, in order
};

RunCurves read_run(const std::string& run) {
  const fs::path path = fs::is_directory(run) ? fs::path(run) / "metrics.jsonl" : fs::path(run);
  if (!fs::is_regular_file(path))
    throw error(run, ": no metrics.jsonl (give a run directory of `boostlm train` or the file)");
  RunCurves curves;
  const fs::path named = path.filename() == "metrics.jsonl" ? path.parent_path() : path.stem();
  curves.label = fs::weakly_canonical(named).filename().string();
  std::istringstream text(read_text_file(path.string()));
  for (std::string line; std::getline(text, line);) {
    try {
      auto j = nlohmann::json::parse(line);
      if (j.is_object() && j.contains("step") && j.contains("loss")) curves.lines.push_back(j);
    } catch (const nlohmann::json::exception&) {  // a last line cut short by a crash
    }
  }
  if (curves.lines.empty()) throw error(path.string(), " holds no step yet");
  return curves;
}

// Data files for one run: DIR/runN.dat (step, training loss averaged over `smooth` steps, lr,
// tokens/s) and DIR/runN_val.dat (step, val loss) where validation ran.
bool write_data(const RunCurves& run, const fs::path& dir, int index, int64_t smooth) {
  std::ofstream steps(dir / ("run" + std::to_string(index) + ".dat"));
  std::ofstream val(dir / ("run" + std::to_string(index) + "_val.dat"));
  bool any_val = false;
  double window_sum = 0;
  for (size_t i = 0; i < run.lines.size(); ++i) {
    const auto& m = run.lines[i];
    window_sum += m["loss"].get<double>();
    if (i >= static_cast<size_t>(smooth)) window_sum -= run.lines[i - smooth]["loss"].get<double>();
    const auto n = static_cast<double>(std::min<size_t>(i + 1, smooth));
    char row[160];
    std::snprintf(row, sizeof row, "%ld %.9g %.9g %.9g\n", m["step"].get<int64_t>(), window_sum / n,
                  m.value("lr", 0.0), m.value("tokens_per_s", 0.0));
    steps << row;
    if (m.contains("val_loss")) {
      std::snprintf(row, sizeof row, "%ld %.9g\n", m["step"].get<int64_t>(),
                    m["val_loss"].get<double>());
      val << row;
      any_val = true;
    }
  }
  if (!steps || !val) throw error("cannot write plot data in ", dir.string());
  return any_val;
}

// A string as a gnuplot string literal (double quotes, its backslashes and quotes escaped).
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// "step (N tokens)" where every run trained N tokens a step, else "step".
std::string step_label(const std::vector<RunCurves>& runs) {
  int64_t tokens_per_step = -1;
  for (const RunCurves& run : runs) {
    const auto& first = run.lines.front();
    const int64_t step = first["step"].get<int64_t>(),
                  seen = first.value("tokens_seen", int64_t{0});
    const int64_t first_step_tokens = step > 0 ? seen / step : 0;  // a resumed run counts from 0
    if (tokens_per_step >= 0 && first_step_tokens != tokens_per_step) return "step";
    tokens_per_step = first_step_tokens;
  }
  return tokens_per_step > 0 ? "step (" + std::to_string(tokens_per_step) + " tokens)" : "step";
}

constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string gnuplot_script(const PlotOptions& o, const std::vector<RunCurves>& runs,
                           const std::vector<bool>& has_val, const fs::path& dir) {
  std::vector<std::string> panels;
  std::stringstream list(o.panels);
  for (std::string p; std::getline(list, p, ',');) panels.push_back(p);
  const bool svg = fs::path(o.out).extension() == ".svg";
  const int height = 60 + 260 * static_cast<int>(panels.size());
  std::ostringstream s;
  s << (svg ? "set terminal svg dynamic" : "set terminal pngcairo") << " size 900," << height
    << " font \",10\"\n"
    << "set output " << quoted(o.out) << "\n"
    << "set multiplot layout " << panels.size() << ",1 title " << quoted(o.title)
    << " noenhanced\nset grid\nset key top right noenhanced\nset xlabel "
    << quoted(step_label(runs)) << "\n";
  const std::string smoothed =
      o.smooth > 1 ? " train (mean of " + std::to_string(o.smooth) + " steps)" : " train";
  for (const std::string& panel : panels) {
    std::vector<std::string> series;
    for (size_t i = 0; i < runs.size(); ++i) {
      const std::string data = quoted((dir / ("run" + std::to_string(i) + ".dat")).string());
      const std::string colour =
          std::string(" lc rgb \"") + kColours[i % std::size(kColours)] + "\"";
      const std::string& name = runs[i].label;
      if (panel == "loss") {
        // Validation thick with its points, training thin: the curve to compare runs by stands
        // out, and a noisy training loss stays readable.
        series.push_back(data + " using 1:2 with lines" + colour + " lw 1 title " +
                         quoted(name + smoothed));
        if (has_val[i])
          series.push_back(quoted((dir / ("run" + std::to_string(i) + "_val.dat")).string()) +
                           " using 1:2 with linespoints" + colour + " lw 2.5 pt 7 ps 0.9 title " +
                           quoted(name + " validation"));
      } else {
        series.push_back(data + " using 1:" + (panel == "lr" ? "3" : "4") + " with lines" + colour +
                         " lw 1.5 title " + quoted(name));
      }
    }
    s << "set ylabel "
      << (panel == "loss" ? "\"loss (cross-entropy)\""
          : panel == "lr" ? "\"learning rate\""
                          : "\"tokens/s\"")
      << "\n"
      << "plot ";
    for (size_t i = 0; i < series.size(); ++i) s << (i ? ", " : "") << series[i];
    s << "\n";
  }
  s << "unset multiplot\n";
  return s.str();
}

// Runs gnuplot on `script`; throws with what gnuplot said when it fails.
void run_gnuplot(const fs::path& script, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const std::string script_path = script.string();
  char* argv[] = {const_cast<char*>("gnuplot"), const_cast<char*>(script_path.c_str()), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    throw error("cannot run gnuplot (", std::strerror(spawned),
                "); scripts/setup.sh installs it (Debian's gnuplot-nox)");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw error("gnuplot failed: ", read_text_file(log.string()));
}

void plot(const PlotOptions& o) {
  const std::string extension = fs::path(o.out).extension().string();
  if (extension != ".png" && extension != ".svg")
    throw error("-o ", o.out, ": the file name must end in .png or .svg");
  if (!o.labels.empty() && o.labels.size() != o.runs.size())
    throw error("--label given ", o.labels.size(), " times for ", o.runs.size(), " runs");
  std::vector<RunCurves> runs;
  for (const std::string& run : o.runs) runs.push_back(read_run(run));
  for (size_t i = 0; i < o.labels.size(); ++i) runs[i].label = o.labels[i];
  char scratch[] = "/tmp/boostlm_plot.XXXXXX";
  if (!::mkdtemp(scratch)) throw error("cannot make a directory in /tmp: ", std::strerror(errno));
  const fs::path dir(scratch);
  try {
    std::vector<bool> has_val;
    for (size_t i = 0; i < runs.size(); ++i)
      has_val.push_back(write_data(runs[i], dir, static_cast<int>(i), o.smooth));
    PlotOptions titled = o;
    if (titled.title.empty())
      for (size_t i = 0; i < runs.size(); ++i) titled.title += (i ? ", " : "") + runs[i].label;
    write_file_atomically((dir / "plot.gp").string(), gnuplot_script(titled, runs, has_val, dir));
    run_gnuplot(dir / "plot.gp", dir / "gnuplot.log");
  } catch (...) {
    fs::remove_all(dir);
    throw;
  }
  fs::remove_all(dir);
  std::printf("%s\n", o.out.c_str());
}

}  // namespace

void add_plot(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plot", "draw runs' loss, learning rate and tokens/s from metrics.jsonl (gnuplot)");
  auto o = std::make_shared<PlotOptions>();
  cmd->add_option("runs", o->runs, "run directories of `boostlm train`, or metrics.jsonl files")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--out,-o", o->out, "the image: FILE.png or FILE.svg")->required();
  cmd->add_option("--label", o->labels,
                  "a run's name in the legend, once per run, in order "
                  "(default: the run directory's name)")
      ->allow_extra_args(false);  // one name per --label: `--label a RUN` leaves RUN a run
  cmd->add_option("--title", o->title, "the title above the panels (default: the runs' names)");
  cmd->add_option("--panels", o->panels,
                  "which panels, in order, comma-separated: loss, lr, tokens_per_s")
      ->check([](const std::string& value) -> std::string {
        std::stringstream list(value);
        int count = 0;
        for (std::string p; std::getline(list, p, ','); ++count)
          if (p != "loss" && p != "lr" && p != "tokens_per_s")
            return "unknown panel '" + p + "' (loss, lr or tokens_per_s)";
        return count ? "" : "no panel named";
      });
  cmd->add_option("--smooth", o->smooth, "steps averaged in the plotted training loss")
      ->check(CLI::PositiveNumber);
  cmd->callback([o] { plot(*o); });
}

}  // namespace boostlm::cli
