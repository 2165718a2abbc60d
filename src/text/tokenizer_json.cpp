// BpeTokenizer::load and ::save: Hugging Face tokenizer.json files with a byte-level BPE model, in
// GPT-2's shape (pre_tokenizer ByteLevel with its regex) and Llama 3's (Split with its regex, then
// ByteLevel). Every error names the file and the field.
#include "base/error.h"
#include "text/bpe_tokenizer.h"
#include "text/byte_level.h"
#include "text/utf8.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <unordered_map>

namespace fp8kit::text {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Far above real files (Llama 3's tokenizer.json is 9 MB), so that reading the wrong file fails at once.
constexpr size_t kMaxTokenizerJsonBytes = size_t{512} << 20;

std::string read_file(const fs::path& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  FP8KIT_CHECK(fs::exists(status), "cannot open tokenizer file {}: check the path", path.string());
  FP8KIT_CHECK(fs::is_regular_file(status), "tokenizer file {} is not a regular file (a folder, device or pipe); give a "
               "tokenizer.json", path.string());
  std::ifstream in(path, std::ios::binary);
  FP8KIT_CHECK(in.good(), "cannot open tokenizer file {}: check its permissions", path.string());
  std::string bytes;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    bytes.append(chunk, static_cast<size_t>(in.gcount()));
    FP8KIT_CHECK(bytes.size() <= kMaxTokenizerJsonBytes, "tokenizer file {} is larger than {} MiB; is it the right file?",
                 path.string(), kMaxTokenizerJsonBytes >> 20);
  }
  FP8KIT_CHECK(!in.bad(), "error while reading tokenizer file {}", path.string());
  return bytes;
}

// A value for a message: nested values only by their type (dump() recurses, and a file may nest deeper
// than the stack allows).
std::string shown(const json& value) {
  if (!value.is_structured()) return value.dump();
  const auto type = value.is_object() ? value.find("type") : value.end();
  if (type != value.end() && type->is_string()) return fmt::format("{{\"type\":{}}}", type->dump());
  return value.is_object() ? "an object" : "an array";
}

// A JSON value and its place in the file ("model.merges[3]"), for errors that name the field.
struct Field {
  const json& value;
  std::string name;

  bool absent_or_null() const { return value.is_null(); }

  Field at(const char* key) const {
    static const json null_value;
    FP8KIT_CHECK(value.is_object(), "{} is not a JSON object", name);
    const auto it = value.find(key);
    return {it == value.end() ? null_value : *it, name.empty() ? key : name + "." + key};
  }
  Field at(size_t index) const { return {value.at(index), fmt::format("{}[{}]", name, index)}; }

  const json& object() const {
    FP8KIT_CHECK(value.is_object(), "{} must be a JSON object", name);
    return value;
  }
  const json& array() const {
    FP8KIT_CHECK(value.is_array(), "{} must be a JSON array", name);
    return value;
  }
  const std::string& string() const {
    FP8KIT_CHECK(value.is_string(), "{} must be a string", name);
    return value.get_ref<const std::string&>();
  }
  bool boolean(bool default_value) const {
    if (value.is_null()) return default_value;
    FP8KIT_CHECK(value.is_boolean(), "{} must be true or false", name);
    return value.get<bool>();
  }
  int64_t integer() const {
    FP8KIT_CHECK(value.is_number_integer(), "{} must be a whole number", name);
    return value.get<int64_t>();
  }
  std::string type() const { return at("type").string(); }

  // Fails unless the field is absent, null or (for strings) empty: what fp8kit does not implement.
  void require_unset(std::string_view why) const {
    const bool unset = value.is_null() || (value.is_string() && value.get_ref<const std::string&>().empty()) ||
                       (value.is_boolean() && !value.get<bool>());
    FP8KIT_CHECK(unset, "{} is {}: {}", name, shown(value), why);
  }
};

SplitPattern read_pre_tokenizer(const Field& pre) {
  FP8KIT_CHECK(!pre.absent_or_null(), "pre_tokenizer is missing: a byte-level BPE needs ByteLevel");
  const std::string type = pre.type();
  if (type == "ByteLevel") {
    pre.at("add_prefix_space").require_unset("fp8kit does not add a prefix space; set it to false");
    FP8KIT_CHECK(pre.at("use_regex").boolean(true),
                 "pre_tokenizer.use_regex is false with no Split before it: fp8kit needs GPT-2's regex or a Split");
    return SplitPattern::kGpt2;
  }
  FP8KIT_CHECK(type == "Sequence", "pre_tokenizer.type is \"{}\": fp8kit reads ByteLevel, or a Sequence of Split and "
               "ByteLevel", type);
  const Field steps = pre.at("pretokenizers");
  FP8KIT_CHECK(steps.array().size() == 2, "{} has {} entries: fp8kit reads [Split, ByteLevel]", steps.name,
               steps.value.size());
  const Field split = steps.at(size_t{0}), byte_level = steps.at(size_t{1});
  FP8KIT_CHECK(split.type() == "Split", "{}.type is \"{}\": fp8kit reads [Split, ByteLevel]", split.name, split.type());
  const Field regex = split.at("pattern").at("Regex");
  const auto pattern = split_pattern_from_regex(regex.string());
  FP8KIT_CHECK(pattern.has_value(), "{} is not a pattern fp8kit implements (GPT-2's or Llama 3's): {}", regex.name,
               shown(regex.value));
  const Field behavior = split.at("behavior");
  FP8KIT_CHECK(behavior.string() == "Isolated", "{} is \"{}\": fp8kit implements \"Isolated\"", behavior.name,
               behavior.string());
  split.at("invert").require_unset("fp8kit does not implement inverted splits");
  FP8KIT_CHECK(byte_level.type() == "ByteLevel", "{}.type is \"{}\": fp8kit reads [Split, ByteLevel]", byte_level.name,
               byte_level.type());
  byte_level.at("add_prefix_space").require_unset("fp8kit does not add a prefix space; set it to false");
  byte_level.at("use_regex").require_unset("after a Split, ByteLevel must not split again; set it to false");
  return *pattern;
}

// Post-processors add special tokens around a text (Llama 3: a BOS before it); encode never does,
// but the ids a TemplateProcessing puts before a single text are kept as the model's prefix (a
// suffix, which no byte-level Llama or GPT-2 adds, is not). One step: ByteLevel or TemplateProcessing.
void read_post_processor_step(const Field& post, std::vector<int32_t>& prefix) {
  const std::string type = post.type();
  FP8KIT_CHECK(type == "ByteLevel" || type == "TemplateProcessing",
               "{}.type is \"{}\": fp8kit reads ByteLevel and TemplateProcessing post-processors, or a Sequence of "
               "them",
               post.name, type);
  if (type == "ByteLevel") return;
  const Field single = post.at("single");
  for (size_t i = 0; i < single.array().size(); ++i) {
    const Field piece = single.at(i);
    if (!piece.at("SpecialToken").absent_or_null()) {
      const Field name = piece.at("SpecialToken").at("id");
      const Field ids = post.at("special_tokens").at(name.string().c_str()).at("ids");
      for (size_t k = 0; k < ids.array().size(); ++k) {
        const int64_t id = ids.at(k).integer();
        FP8KIT_CHECK(id >= 0 && id < INT32_MAX, "{} is {}, not a token id", ids.at(k).name, id);
        prefix.push_back(static_cast<int32_t>(id));
      }
    } else {
      FP8KIT_CHECK(!piece.at("Sequence").absent_or_null(), "{} is neither a SpecialToken nor a Sequence", piece.name);
      return;  // the text: what follows it is a suffix
    }
  }
}

// A Sequence holds steps, not Sequences: read without recursion (a deeply nested file cannot
// exhaust the stack).
void read_post_processor(const Field& post, std::vector<int32_t>& prefix) {
  if (post.absent_or_null()) return;
  if (post.type() != "Sequence") return read_post_processor_step(post, prefix);
  const Field steps = post.at("processors");
  for (size_t i = 0; i < steps.array().size(); ++i) read_post_processor_step(steps.at(i), prefix);
}

// The two token strings of a merge: "a b" or ["a", "b"].
std::pair<std::string, std::string> merge_parts(const Field& merge) {
  if (merge.value.is_array()) {
    FP8KIT_CHECK(merge.value.size() == 2, "{} has {} entries, not two tokens", merge.name, merge.value.size());
    return {merge.at(size_t{0}).string(), merge.at(size_t{1}).string()};
  }
  const std::string& line = merge.string();
  const size_t space = line.find(' ');
  FP8KIT_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos,
               "{} is \"{}\", not two tokens separated by one space", merge.name, line);
  return {line.substr(0, space), line.substr(space + 1)};
}

BpeModel read_model(const json& root) {
  FP8KIT_CHECK(root.is_object(), "the file holds JSON but not an object: a tokenizer.json is one");
  const Field top{root, ""};
  BpeModel model;
  const Field m = top.at("model");
  m.object();
  const std::string type = m.type();
  FP8KIT_CHECK(type == "BPE", "model.type is \"{}\": fp8kit reads only byte-level BPE models", type);
  m.at("dropout").require_unset("fp8kit does not implement BPE dropout; set it to null");
  m.at("continuing_subword_prefix").require_unset("fp8kit's byte-level BPE has no subword prefix");
  m.at("end_of_word_suffix").require_unset("fp8kit's byte-level BPE has no end-of-word suffix");
  m.at("byte_fallback").require_unset("byte-level BPE needs no byte fallback");
  model.ignore_merges = m.at("ignore_merges").boolean(false);
  top.at("normalizer").require_unset("fp8kit does not implement normalizers");
  top.at("truncation").require_unset("fp8kit does not truncate on encode");
  top.at("padding").require_unset("fp8kit does not pad on encode");
  model.pattern = read_pre_tokenizer(top.at("pre_tokenizer"));
  const Field decoder = top.at("decoder");
  FP8KIT_CHECK(decoder.absent_or_null() || decoder.type() == "ByteLevel",
               "decoder.type is \"{}\": a byte-level BPE decodes with ByteLevel", decoder.type());
  read_post_processor(top.at("post_processor"), model.prefix);

  // Ids: those of model.vocab and added_tokens, which must together be 0..n-1.
  const Field vocab = m.at("vocab");
  const Field added = top.at("added_tokens");
  const size_t num_added = added.absent_or_null() ? 0 : added.array().size();
  const size_t limit = vocab.object().size() + num_added;
  std::vector<std::optional<std::string>> tokens;
  const auto set_token = [&](const Field& where, int64_t id, std::string token) {
    FP8KIT_CHECK(id >= 0 && static_cast<size_t>(id) < limit,
                 "{}: id {} is outside 0..{} (ids must number the tokens from 0, without gaps)", where.name, id, limit - 1);
    if (tokens.size() <= static_cast<size_t>(id)) tokens.resize(id + 1);
    tokens[id] = std::move(token);
  };
  std::unordered_map<std::string, int32_t> added_ids;  // content -> id
  for (size_t i = 0; i < num_added; ++i) {
    const Field token = added.at(i);
    const std::string& content = token.at("content").string();
    const int64_t id = token.at("id").integer();
    for (const char* key : {"single_word", "lstrip", "rstrip"}) {
      token.at(key).require_unset("fp8kit matches added tokens exactly");
    }
    FP8KIT_CHECK(id < 0 || static_cast<size_t>(id) >= tokens.size() || !tokens[id], "{}: id {} appears twice",
                 token.name, id);
    set_token(token, id, content);
    added_ids.emplace(content, static_cast<int32_t>(id));
    model.added_tokens.push_back({static_cast<int32_t>(id), token.at("special").boolean(false)});
  }
  std::unordered_map<std::string, int32_t> ids;  // model.vocab's strings
  for (auto item = vocab.value.begin(); item != vocab.value.end(); ++item) {
    const std::string& key = item.key();
    const Field entry{item.value(), fmt::format("model.vocab[\"{}\"]", key)};
    const int64_t id = entry.integer();
    if (const auto it = added_ids.find(key); it != added_ids.end() && it->second == id) {
      ids.emplace(key, it->second);  // an added token listed in the vocabulary too, as GPT-2 does
      continue;
    }
    FP8KIT_CHECK(id < 0 || static_cast<size_t>(id) >= tokens.size() || !tokens[id],
                 "{}: id {} is already the token \"{}\"", entry.name, id, to_byte_level(*tokens[id]));
    const std::optional<std::string> bytes = from_byte_level(key);
    FP8KIT_CHECK(bytes.has_value(), "{} is not a byte-level token (it has a character outside GPT-2's byte alphabet)",
                 entry.name);
    set_token(entry, id, *bytes);
    ids.emplace(key, static_cast<int32_t>(id));
  }
  model.tokens.reserve(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    FP8KIT_CHECK(tokens[id].has_value(), "id {} is neither in model.vocab nor in added_tokens (ids must number the "
                 "tokens from 0, without gaps)", id);
    model.tokens.push_back(std::move(*tokens[id]));
  }

  const Field merges = m.at("merges");
  model.merges.reserve(merges.array().size());
  for (size_t i = 0; i < merges.value.size(); ++i) {
    const Field merge = merges.at(i);
    const auto [left, right] = merge_parts(merge);
    const auto id_of = [&](const std::string& token) {
      const auto it = ids.find(token);
      FP8KIT_CHECK(it != ids.end(), "{}: \"{}\" is not in model.vocab", merge.name, token);
      return it->second;
    };
    model.merges.emplace_back(id_of(left), id_of(right));
  }
  return model;
}

}  // namespace

BpeTokenizer BpeTokenizer::load(const fs::path& tokenizer_json) {
  const std::string bytes = read_file(tokenizer_json);
  try {
    return BpeTokenizer(read_model(json::parse(bytes)));
  } catch (const json::exception& e) {
    fail("{}: not a valid tokenizer.json: {}", tokenizer_json.string(), e.what());
  } catch (const Error& e) {
    fail("{}: {}", tokenizer_json.string(), e.what());
  }
}

void BpeTokenizer::save(const fs::path& tokenizer_json) const {
  using ordered = nlohmann::ordered_json;
  ordered added = ordered::array();
  for (const BpeAddedToken& token : model_.added_tokens) {
    const std::string& content = model_.tokens[token.id];
    FP8KIT_CHECK(is_valid_utf8(content), "the added token {} is not valid UTF-8, which tokenizer.json cannot hold",
                 token.id);
    added.push_back({{"id", token.id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", token.special}});
  }
  // A token as model.vocab spells it: an added token's content, else its byte-level string.
  const auto spelling = [&](int32_t id) { return is_added_[id] ? model_.tokens[id] : to_byte_level(model_.tokens[id]); };
  // Added tokens are in model.vocab too (as Hugging Face's trainer writes them), so that their ids hold there.
  ordered vocab = ordered::object();
  for (int32_t id = 0; id < vocab_size(); ++id) {
    const std::string key = spelling(id);
    const auto [it, inserted] = vocab.emplace(key, id);
    FP8KIT_CHECK(inserted, "cannot write {}: tokens {} and {} are both \"{}\" in model.vocab (an added token equals a "
                 "learned one); choose another special token", tokenizer_json.string(), it.value().get<int32_t>(), id, key);
  }
  ordered merges = ordered::array();
  for (const auto& [left, right] : model_.merges) {
    merges.push_back(to_byte_level(model_.tokens[left]) + " " + to_byte_level(model_.tokens[right]));
  }
  // The prefix as Llama 3's template: the tokens, the text; for a pair, the tokens again before the second.
  const auto post_processor = [&]() -> ordered {
    if (model_.prefix.empty()) return nullptr;
    ordered single = ordered::array(), pair = ordered::array(), special = ordered::object();
    for (const int32_t id : model_.prefix) {
      const std::string name = spelling(id);
      single.push_back({{"SpecialToken", {{"id", name}, {"type_id", 0}}}});
      special[name] = {{"id", name}, {"ids", {id}}, {"tokens", {name}}};
    }
    pair = single;
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    pair.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    for (const int32_t id : model_.prefix) {
      pair.push_back({{"SpecialToken", {{"id", spelling(id)}, {"type_id", 1}}}});
    }
    pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
    return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", special}};
  };
  ordered pre_tokenizer;
  if (model_.pattern == SplitPattern::kGpt2) {
    pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  } else {
    pre_tokenizer = {{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Split"},
                        {"pattern", {{"Regex", split_pattern_regex(model_.pattern)}}},
                        {"behavior", "Isolated"},
                        {"invert", false}},
                       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  }
  ordered root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", std::move(added)},
      {"normalizer", nullptr},
      {"pre_tokenizer", std::move(pre_tokenizer)},
      {"post_processor", post_processor()},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
        {"ignore_merges", model_.ignore_merges}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}}},
  };
  fs::path tmp = tokenizer_json;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    FP8KIT_CHECK(out.good(), "cannot write {}: check that the directory exists and is writable", tmp.string());
    out << root.dump(2) << '\n';
    out.flush();
    FP8KIT_CHECK(out.good(), "error while writing {} (disk full?)", tmp.string());
  }
  std::error_code error;
  fs::rename(tmp, tokenizer_json, error);
  FP8KIT_CHECK(!error, "cannot rename {} to {}: {}", tmp.string(), tokenizer_json.string(), error.message());
}

}  // namespace fp8kit::text
