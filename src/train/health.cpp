// The health event: the scaling table's records as columns of a metrics-log line.
#include "train/health.h"

#include "base/error.h"

#include <cmath>
#include <string>

namespace fp8kit::train {

nlohmann::json health_event(const ops::ScalingTable& table, std::span<const ops::QuantStats> stats) {
  FP8KIT_CHECK(static_cast<int>(stats.size()) == table.size(), "health: {} records for {} FP8 tensors", stats.size(),
               table.size());
  const Fp8Recipe& r = table.recipe();
  nlohmann::json event = {
      {"event", "health"},
      {"recipe", describe(r)},
      {"scaling",
       {{"mode", r.mode == ScalingMode::Current ? "current" : "delayed"},
        {"lag", r.lag == ScalingLag::Keras ? "keras" : "te"},
        {"amax_history", r.amax_history_length},
        {"amax_algo", r.amax_algorithm == AmaxAlgorithm::Max ? "max" : "most_recent"},
        {"margin", r.scale_options.margin}}}};
  nlohmann::json names = nlohmann::json::array(), modes = nlohmann::json::array(), formats = nlohmann::json::array(), count = nlohmann::json::array(),
                 amax = nlohmann::json::array(), scale = nlohmann::json::array(), history = nlohmann::json::array(),
                 saturated = nlohmann::json::array(), flushed = nlohmann::json::array(),
                 subnormal = nlohmann::json::array(), nonfinite = nlohmann::json::array(), snr = nlohmann::json::array();
  for (int i = 0; i < table.size(); ++i) {
    const ops::QuantStats& s = stats[i];
    names.push_back(table.name(i));
    modes.push_back(table.current(i) ? "current" : "delayed");  // per-Linear recipes may mix them
    formats.push_back(std::string(name(table.format(i))));
    count.push_back(s.raw.count);
    amax.push_back(s.raw.amax);
    scale.push_back(s.raw.scale);
    history.push_back(s.raw.history_amax);
    saturated.push_back(s.saturated_fraction());
    flushed.push_back(s.flushed_fraction());
    subnormal.push_back(s.subnormal_fraction());
    nonfinite.push_back(s.nonfinite_fraction());
    const std::optional<double> db = s.snr_db();
    snr.push_back(db && std::isfinite(*db) ? nlohmann::json(*db) : nlohmann::json());
  }
  event["tensors"] = std::move(names);
  event["mode"] = std::move(modes);
  event["format"] = std::move(formats);
  event["count"] = std::move(count);
  event["amax"] = std::move(amax);
  event["scale"] = std::move(scale);
  event["history_amax"] = std::move(history);
  event["saturated"] = std::move(saturated);
  event["flushed"] = std::move(flushed);
  event["subnormal"] = std::move(subnormal);
  event["nonfinite"] = std::move(nonfinite);
  event["snr_db"] = std::move(snr);
  return event;
}

}  // namespace fp8kit::train
