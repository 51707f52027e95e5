#include "train/run_settings.h"

#include <charconv>
#include <cstdlib>
#include <functional>
#include <limits>
#include <type_traits>

#include "core/error.h"

namespace boostlm {

namespace {

// What a resume does with a setting (run_settings.h).
enum class OnResume {
  restore,    // the saved value unless the flag is given
  fixed,      // the saved value; a different one given is refused
  job_shape,  // --tp, --pp, --dp: restored together, or from the command line
};

struct Setting {
  std::string flag;  // as the CLI spells it; the saved key is its name in snake case
  OnResume on_resume;
  std::function<nlohmann::json(TrainOptions&)> get;
  std::function<void(TrainOptions&, const nlohmann::json&)> set;  // throws on a malformed value
  std::string why_fixed;                                          // OnResume::fixed: why
};

// A float as the shortest decimal that reads back as the same float ("0.003", not
// 0.003000000026077032): trainer_state.json reads as the flags were typed, and restores exactly.
nlohmann::json decimal(float value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return std::strtod(std::string(text, end).c_str(), nullptr);
}

// A saved value of type T; anything else (a string for a number, a fraction for a count) throws.
template <class T>
T saved_as(const nlohmann::json& v) {
  bool ok;
  if constexpr (std::is_same_v<T, bool>)
    ok = v.is_boolean();
  else if constexpr (std::is_floating_point_v<T>)
    ok = v.is_number();
  else if constexpr (std::is_unsigned_v<T>)
    ok = v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0) &&
         v.get<uint64_t>() <= std::numeric_limits<T>::max();
  else if constexpr (std::is_integral_v<T>)
    ok = v.is_number_integer() &&
         (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t{std::numeric_limits<T>::max()}
                                 : v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                                       v.get<int64_t>() <= std::numeric_limits<T>::max());
  else
    ok = v.is_string();
  if (!ok) throw error("not a value of the right type");
  return v.get<T>();
}

// A setting held in one field of the options; `field` maps the options to a reference to it.
template <class Field>
Setting field_setting(std::string flag, Field field, OnResume on_resume = OnResume::restore,
                      std::string why_fixed = "") {
  using T = std::remove_reference_t<decltype(field(std::declval<TrainOptions&>()))>;
  return {std::move(flag), on_resume,
          [field](TrainOptions& o) -> nlohmann::json {
            if constexpr (std::is_same_v<T, float>)
              return decimal(field(o));
            else
              return field(o);
          },
          [field](TrainOptions& o, const nlohmann::json& v) { field(o) = saved_as<T>(v); },
          std::move(why_fixed)};
}

// A setting whose flag takes one of two words, held as a bool.
Setting switch_setting(std::string flag, bool& (*field)(TrainOptions&), const char* on,
                       const char* off) {
  return {std::move(flag), OnResume::restore,
          [=](TrainOptions& o) -> nlohmann::json { return field(o) ? on : off; },
          [=](TrainOptions& o, const nlohmann::json& v) {
            const std::string word = saved_as<std::string>(v);
            if (word != on && word != off) throw error("neither ", on, " nor ", off);
            field(o) = word == on;
          },
          ""};
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> all = [] {
    const char* position =
        "the checkpoint's data position counts windows of its batch shape, so the next batch "
        "would not be the one an uninterrupted run reads";
    const char* order = "the shuffled order of the data windows follows from it";
    std::vector<Setting> s;
    s.push_back(field_setting("--lr", [](TrainOptions& o) -> float& { return o.schedule.max_lr; }));
    s.push_back(
        field_setting("--min-lr", [](TrainOptions& o) -> float& { return o.schedule.min_lr; }));
    s.push_back(field_setting("--warmup",
                              [](TrainOptions& o) -> int64_t& { return o.schedule.warmup_steps; }));
    s.push_back(field_setting("--schedule",
                              [](TrainOptions& o) -> std::string& { return o.schedule.kind; }));
    s.push_back(field_setting("--steps", [](TrainOptions& o) -> int64_t& { return o.steps; }));
    s.push_back(field_setting("--schedule-steps",
                              [](TrainOptions& o) -> int64_t& { return o.schedule_steps; }));
    s.push_back({"--precision", OnResume::restore,
                 [](TrainOptions& o) -> nlohmann::json { return to_string(o.precision); },
                 [](TrainOptions& o, const nlohmann::json& v) {
                   o.precision = parse_dtype(saved_as<std::string>(v));
                 },
                 ""});
    s.push_back({"--residual-dtype", OnResume::restore,
                 [](TrainOptions& o) -> nlohmann::json {
                   return o.block.residual ? nlohmann::json(to_string(*o.block.residual))
                                           : nlohmann::json();
                 },
                 [](TrainOptions& o, const nlohmann::json& v) {
                   if (v.is_null())
                     o.block.residual.reset();
                   else
                     o.block.residual = parse_dtype(saved_as<std::string>(v));
                 },
                 ""});
    s.push_back(field_setting(
        "--batch-size", [](TrainOptions& o) -> int64_t& { return o.batch_size; }, OnResume::fixed,
        position));
    s.push_back(field_setting(
        "--seq-len", [](TrainOptions& o) -> int64_t& { return o.seq_len; }, OnResume::fixed,
        position));
    s.push_back(
        field_setting("--grad-accum", [](TrainOptions& o) -> int64_t& { return o.grad_accum; }));
    s.push_back(field_setting(
        "--seed", [](TrainOptions& o) -> uint64_t& { return o.seed; }, OnResume::fixed, order));
    s.push_back(field_setting(
        "--shuffle", [](TrainOptions& o) -> bool& { return o.shuffle; }, OnResume::fixed, order));
    s.push_back({"--layout", OnResume::restore,
                 [](TrainOptions& o) -> nlohmann::json {
                   return o.layout ? nlohmann::json(to_string(*o.layout)) : nlohmann::json();
                 },
                 [](TrainOptions& o, const nlohmann::json& v) {
                   o.layout = parse_layout(saved_as<std::string>(v));
                 },
                 ""});
    s.push_back(switch_setting(
        "--rmsnorm", [](TrainOptions& o) -> bool& { return o.block.online_norm; }, "online",
        "sync"));
    s.push_back(switch_setting(
        "--grouping", [](TrainOptions& o) -> bool& { return o.block.grouping; }, "on", "off"));
    s.push_back({"--recompute", OnResume::restore,
                 [](TrainOptions& o) -> nlohmann::json { return to_string(o.block.recompute); },
                 [](TrainOptions& o, const nlohmann::json& v) {
                   o.block.recompute = parse_recompute(saved_as<std::string>(v));
                 },
                 ""});
    s.push_back(field_setting(
        "--tp", [](TrainOptions& o) -> int& { return o.grid.tp; }, OnResume::job_shape));
    s.push_back(field_setting(
        "--pp", [](TrainOptions& o) -> int& { return o.grid.pp; }, OnResume::job_shape));
    s.push_back(field_setting(
        "--dp", [](TrainOptions& o) -> int& { return o.grid.dp; }, OnResume::job_shape));
    s.push_back(field_setting("--zero", [](TrainOptions& o) -> int& { return o.zero; }));
    s.push_back(field_setting("--weight-decay",
                              [](TrainOptions& o) -> float& { return o.optimizer.weight_decay; }));
    s.push_back(field_setting("--grad-clip",
                              [](TrainOptions& o) -> float& { return o.optimizer.grad_clip; }));
    s.push_back(
        field_setting("--beta1", [](TrainOptions& o) -> float& { return o.optimizer.beta1; }));
    s.push_back(
        field_setting("--beta2", [](TrainOptions& o) -> float& { return o.optimizer.beta2; }));
    s.push_back(
        field_setting("--adam-eps", [](TrainOptions& o) -> float& { return o.optimizer.eps; }));
    s.push_back(field_setting("--eval-interval",
                              [](TrainOptions& o) -> int64_t& { return o.eval_interval; }));
    s.push_back(field_setting("--eval-batches",
                              [](TrainOptions& o) -> int64_t& { return o.eval_batches; }));
    s.push_back(field_setting("--save-interval",
                              [](TrainOptions& o) -> int64_t& { return o.save_interval; }));
    s.push_back(
        field_setting("--keep", [](TrainOptions& o) -> int64_t& { return o.keep_checkpoints; }));
    return s;
  }();
  return all;
}

// "--min-lr" is saved as "min_lr".
std::string key_of(const std::string& flag) {
  std::string key = flag.substr(2);
  for (char& c : key)
    if (c == '-') c = '_';
  return key;
}

// How a value reads after its flag in a message.
std::string shown(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "on" : "off";
  if (value.is_null()) return "(default)";
  return value.dump();
}

// The saved settings, with the batch shape and data order of a checkpoint older than them taken
// from the loader's state (which has always recorded them).
nlohmann::json saved_settings_of(const TrainingState& saved) {
  nlohmann::json extra = saved.extra.is_object() ? saved.extra : nlohmann::json::object();
  for (const char* key : {"batch_size", "seq_len", "shuffle", "seed"})
    if (!extra.contains(key) && saved.loader.is_object() && saved.loader.contains(key))
      extra[key] = saved.loader.at(key);
  return extra;
}

// `o` with setting `s` at the saved value, which is checked on the way.
TrainOptions with_saved(const Setting& s, const TrainOptions& o, const nlohmann::json& value,
                        const std::string& source) {
  TrainOptions out = o;
  try {
    s.set(out, value);
  } catch (const std::exception& e) {
    throw error("checkpoint: ", source, ": the saved setting '", key_of(s.flag), "' is ",
                value.dump(), ", not a value of ", s.flag, " (", e.what(), ")");
  }
  return out;
}

// --tp, --pp and --dp together: the checkpoint's when none is given and the job has its number
// of ranks (a TP 2 run resumed by `launch -n 2` stays TP 2); otherwise the command line's.
void restore_job_shape(TrainOptions& o, const nlohmann::json& extra, int world_size,
                       const std::string& source, std::vector<std::string>& lines) {
  std::vector<const Setting*> shape;
  for (const Setting& s : settings())
    if (s.on_resume == OnResume::job_shape) shape.push_back(&s);
  TrainOptions saved = o;
  bool any_given = false;
  for (const Setting* s : shape) {
    if (!extra.contains(key_of(s->flag))) return;  // older than the parallel sizes: as given
    saved = with_saved(*s, saved, extra.at(key_of(s->flag)), source);
    any_given = any_given || o.given.count(s->flag);
  }
  if (!any_given && saved.grid.world() == world_size) {
    o.grid = saved.grid;
    return;
  }
  for (const Setting* s : shape) {
    const nlohmann::json before = s->get(saved), now = s->get(o);
    if (before == now) continue;
    std::string why = o.given.count(s->flag) ? "given on the command line"
                      : any_given            ? "the default: --tp, --pp and --dp are restored "
                                               "together, when none of them is given"
                                  : "the default: this job has " + std::to_string(world_size) +
                                        " rank(s), the checkpoint's run had " +
                                        std::to_string(saved.grid.world());
    lines.push_back("resume: " + s->flag + " " + shown(before) + " -> " + shown(now) + " (" + why +
                    "; the checkpoint reshards)");
  }
}

}  // namespace

nlohmann::json saved_run_settings(const TrainOptions& options) {
  TrainOptions o = options;
  nlohmann::json out = nlohmann::json::object();
  for (const Setting& s : settings()) out[key_of(s.flag)] = s.get(o);
  return out;
}

std::vector<std::string> restore_run_settings(TrainOptions& o, const TrainingState& saved,
                                              int world_size, const std::string& source) {
  const nlohmann::json extra = saved_settings_of(saved);
  std::vector<std::string> lines, missing, kept;
  for (const Setting& s : settings()) {
    if (s.on_resume == OnResume::job_shape) continue;
    const std::string key = key_of(s.flag);
    if (!extra.contains(key)) {
      missing.push_back(s.flag);
      continue;
    }
    TrainOptions restored = with_saved(s, o, extra.at(key), source);
    const nlohmann::json before = s.get(restored), now = s.get(o);
    if (!o.given.count(s.flag)) {
      if (before != now) kept.push_back(s.flag + " " + shown(before));
      o = std::move(restored);
      continue;
    }
    if (before == now) continue;
    if (s.on_resume == OnResume::fixed)
      throw error("--resume: ", s.flag, " ", shown(now), " differs from the checkpoint's ",
                  shown(before), ", and it cannot change on a resume: ", s.why_fixed, ". Omit ",
                  s.flag, " to keep ", shown(before),
                  ", or start a new run from the checkpoint's weights with --init-from");
    lines.push_back("resume: " + s.flag + " " + shown(before) + " -> " + shown(now) +
                    " (given on the command line)");
  }
  restore_job_shape(o, extra, world_size, source, lines);
  if (!kept.empty()) {
    std::string line = "resume: keeping the checkpoint's";
    for (size_t i = 0; i < kept.size(); ++i) line += (i ? ", " : " ") + kept[i];
    lines.push_back(line + " (a flag given again overrides its setting)");
  }
  if (extra.contains("schedule_steps") && !o.given.count("--schedule-steps") &&
      o.schedule_steps != o.steps)
    lines.push_back("resume: keeping the checkpoint's learning-rate schedule of " +
                    std::to_string(o.schedule_steps) + " steps (--schedule-steps changes it)");
  if (!missing.empty()) {
    std::string line = "resume: the checkpoint predates saved";
    for (size_t i = 0; i < missing.size(); ++i) line += (i ? ", " : " ") + missing[i];
    lines.push_back(line + ": those come from the command line (or their defaults)");
  }
  return lines;
}

}  // namespace boostlm
