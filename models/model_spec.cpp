// The YAML model spec: `family` picks a builder, the other fields its sizes.
#include <string>

#include "models/families.hpp"
#include "schedule/error.hpp"

namespace pipetwin::models {

Model model_from_yaml(const YamlFields& y) {
  const std::string family = y.text("family");
  const std::string name = y.text_or("name", family);
  Precision precision = Precision::FP32;
  if (y.has("precision")) {
    try {
      precision = parse_precision(y.text("precision"));
    } catch (const Error& e) {
      y.fail("precision", e.what());
    }
  }
  const std::vector<std::string> common{"family", "name", "precision"};
  const auto known = [&](std::vector<std::string> fields) {
    fields.insert(fields.end(), common.begin(), common.end());
    y.reject_unknown(fields);
  };
  if (family == "transformer") {
    known({"layers", "d_model", "d_ff", "heads", "seq_len", "vocab"});
    TransformerSpec t{y.positive_int("layers"), y.positive_int("d_model"), y.positive_int("d_ff"),
                      y.positive_int("heads"),  y.positive_int("seq_len"), y.positive_int("vocab")};
    if (t.d_model % t.heads != 0) y.fail("heads", "must divide d_model (" + std::to_string(t.d_model) + ")");
    return transformer_model(t, precision, name);
  }
  if (family == "mlp") {
    known({"input", "hidden", "output"});
    return mlp_model({y.positive_int("input"), y.positive_int("output"), y.positive_int_list("hidden")}, precision, name);
  }
  if (family == "resnet") {
    known({"image", "in_channels", "stem_channels", "stages", "classes"});
    return resnet_model({y.positive_int("image"), y.positive_int_or("in_channels", 3), y.positive_int("stem_channels"),
                         y.positive_int("classes"), y.positive_int_list("stages")},
                        precision, name);
  }
  if (family == "amoebanet") {
    known({"cells", "filters", "image", "in_channels", "classes"});
    const auto cells = y.positive_int("cells");
    if (cells % 3 != 0) y.fail("cells", "must be a multiple of 3 (three groups of normal cells), got " + std::to_string(cells));
    return amoebanet_model({cells, y.positive_int("filters"), y.positive_int("image"), y.positive_int_or("in_channels", 3),
                            y.positive_int("classes")},
                           precision, name);
  }
  y.fail("family", "unknown family '" + family + "' (valid: transformer, mlp, resnet, amoebanet)");
}

Model load_model(const std::string& path) { return model_from_yaml(YamlFields(load_yaml_file(path), path)); }

}  // namespace pipetwin::models
