// tokenizer.json: loading GPT-2's and Llama 3's shapes (small files written here in those shapes,
// with the real files' byte-token ids), save -> load giving identical encodings, and the errors.
#include "bpe_models.h"
#include "common/error_of.h"
#include "common/temp_dir.h"
#include "text/bpe_learner.h"
#include "text/bpe_tokenizer.h"
#include "text/byte_level.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace fp8kit::text {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;
using testing::error_of;

// The 256 byte tokens in GPT-2's (and Llama 3's) id order: the printable bytes first, then the rest.
json byte_vocab() {
  json vocab = json::object();
  for (const bool printable : {true, false}) {
    for (int b = 0; b < 256; ++b) {
      if (((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) == printable) {
        vocab[std::string(byte_level_char(static_cast<uint8_t>(b)))] = vocab.size();
      }
    }
  }
  return vocab;
}

json gpt2_json() {
  json j = json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 259, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": true, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
              "vocab": {}, "merges": ["Ġ t", "h e", "Ġt he"]}})");
  j["model"]["vocab"] = byte_vocab();
  for (const char* token : {"Ġt", "he", "Ġthe", "<|endoftext|>"}) j["model"]["vocab"][token] = j["model"]["vocab"].size();
  return j;
}

json llama3_json() {
  json j = json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [
      {"id": 260, "content": "<|begin_of_text|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 261, "content": "<|end_of_text|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "post_processor": {"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                                {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [], "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [260],
                                                             "tokens": ["<|begin_of_text|>"]}}}]},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
              "vocab": {}, "merges": [["Ġ", "t"], ["h", "e"], ["Ġt", "he"]]}})");
  j["model"]["vocab"] = byte_vocab();
  for (const char* token : {"Ġt", "he", "Ġthe", "hello"}) j["model"]["vocab"][token] = j["model"]["vocab"].size();
  return j;
}

class TokenizerJson : public ::testing::Test {
 protected:
  fs::path write_text(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return dir_ / name;
  }
  fs::path write(const std::string& name, const json& j) const { return write_text(name, j.dump(2)); }
  // The error loading `j` gives, less the "<path>: " prefix.
  std::string load_error(const json& j) const {
    const fs::path path = write("bad.json", j);
    const std::string message = error_of([&] { BpeTokenizer::load(path); });
    EXPECT_EQ(message.rfind(path.string() + ": ", 0), 0u) << message;
    return message.substr(std::min(message.size(), path.string().size() + 2));
  }
  const testing::TempDir dir_{"tokenizer_json"};
};

TEST_F(TokenizerJson, LoadsGpt2sShape) {
  const BpeTokenizer tokenizer = BpeTokenizer::load(write("gpt2.json", gpt2_json()));
  EXPECT_EQ(tokenizer.vocab_size(), 260);
  EXPECT_EQ(tokenizer.model().pattern, SplitPattern::kGpt2);
  // GPT-2's ids: "Ġ" (space) is 220, "Ċ" (newline) 198, '!' 0, 't' 83.
  EXPECT_THAT(tokenizer.encode(" \n!"), ElementsAre(220, 198, 0));
  EXPECT_THAT(tokenizer.encode("the the"), ElementsAre(83, 257, 258));
  EXPECT_EQ(tokenizer.eos_id(), 259);
  EXPECT_THAT(tokenizer.encode("the<|endoftext|>", SpecialTokens::kParse), ElementsAre(83, 257, 259));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("x\xff the")), "x\xff the");
}

TEST_F(TokenizerJson, LoadsLlama3sShape) {
  const BpeTokenizer tokenizer = BpeTokenizer::load(write("llama3.json", llama3_json()));
  EXPECT_EQ(tokenizer.vocab_size(), 262);
  EXPECT_EQ(tokenizer.model().pattern, SplitPattern::kLlama3);
  EXPECT_TRUE(tokenizer.model().ignore_merges);
  EXPECT_EQ(tokenizer.eos_id(), 261);
  EXPECT_EQ(tokenizer.token_id("<|begin_of_text|>"), 260);
  // "hello" is a token reached by no merge: ignore_merges takes it whole. The Llama 3 split makes
  // " the" one piece and "1234" two.
  EXPECT_THAT(tokenizer.encode("hello the"), ElementsAre(259, 258));
  EXPECT_THAT(tokenizer.encode("1234"), ElementsAre('1' - '!', '2' - '!', '3' - '!', '4' - '!'));
  EXPECT_THAT(tokenizer.encode("<|end_of_text|>", SpecialTokens::kParse), ElementsAre(261));
  // The template's BOS is what a model's inputs begin with; encode adds none, and a save keeps it.
  EXPECT_THAT(tokenizer.bos_ids(), ElementsAre(260));
  tokenizer.save(dir_ / "saved.json");
  EXPECT_THAT(BpeTokenizer::load(dir_ / "saved.json").bos_ids(), ElementsAre(260));
}

TEST_F(TokenizerJson, SaveThenLoadGivesIdenticalEncodings) {
  const std::vector<std::string> texts = {"the cat sat on the mat; the cat's 12345 hats\r\n", "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xff!!"};
  const std::vector<std::string> corpus(10, texts[0] + texts[1]);
  for (const SplitPattern pattern : {SplitPattern::kGpt2, SplitPattern::kLlama3}) {
    const BpeTokenizer learned = learn_bpe(corpus, {.vocab_size = 330, .special_tokens = {"<|endoftext|>", "<|pad|>"},
                                                    .pattern = pattern});
    const fs::path path = dir_ / "tokenizer.json";
    learned.save(path);
    EXPECT_FALSE(fs::exists(dir_ / "tokenizer.json.tmp"));
    const BpeTokenizer loaded = BpeTokenizer::load(path);
    EXPECT_EQ(loaded.model().tokens, learned.model().tokens);
    EXPECT_EQ(loaded.model().merges, learned.model().merges);
    EXPECT_EQ(loaded.model().pattern, pattern);
    EXPECT_EQ(loaded.eos_id(), 0);
    for (const std::string& text : texts) EXPECT_EQ(loaded.encode(text), learned.encode(text));
    // The file in Hugging Face's shape: merges as "a b" strings, specials in added_tokens and model.vocab.
    json j;
    std::ifstream(path) >> j;
    EXPECT_EQ(j["model"]["type"], "BPE");
    EXPECT_TRUE(j["model"]["merges"][0].is_string());
    EXPECT_EQ(j["added_tokens"][1]["content"], "<|pad|>");
    EXPECT_EQ(j["model"]["vocab"]["<|pad|>"], 1);
    EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
    EXPECT_EQ(j["pre_tokenizer"]["type"], pattern == SplitPattern::kGpt2 ? "ByteLevel" : "Sequence");
  }
  // A loaded file saves and loads back the same (GPT-2's added token is in model.vocab too).
  const BpeTokenizer gpt2 = BpeTokenizer::load(write("gpt2.json", gpt2_json()));
  gpt2.save(dir_ / "again.json");
  EXPECT_EQ(BpeTokenizer::load(dir_ / "again.json").model().tokens, gpt2.model().tokens);
}

TEST_F(TokenizerJson, ErrorsNameTheFileAndTheField) {
  EXPECT_EQ(error_of([&] { BpeTokenizer::load(dir_ / "missing.json"); }),
            "cannot open tokenizer file " + (dir_ / "missing.json").string() + ": check the path");
  EXPECT_EQ(error_of([&] { BpeTokenizer::load(dir_.path()); }),
            "tokenizer file " + dir_.path().string() + " is not a regular file (a folder, device or pipe); give a tokenizer.json");
  const fs::path bad = write_text("bad_syntax.json", "{\"model\": ");
  EXPECT_THAT(error_of([&] { BpeTokenizer::load(bad); }), HasSubstr(bad.string() + ": not a valid tokenizer.json: "));
  EXPECT_EQ(load_error(json::array()), "the file holds JSON but not an object: a tokenizer.json is one");

  json j = gpt2_json();
  j["model"]["type"] = "WordPiece";
  EXPECT_EQ(load_error(j), "model.type is \"WordPiece\": fp8kit reads only byte-level BPE models");
  j = gpt2_json();
  j["model"]["merges"][1] = "h zz";
  EXPECT_EQ(load_error(j), "model.merges[1]: \"zz\" is not in model.vocab");
  j["model"]["merges"][1] = "he";
  EXPECT_EQ(load_error(j), "model.merges[1] is \"he\", not two tokens separated by one space");
  j = gpt2_json();
  j["model"]["merges"].push_back("Ġthe Ġt");
  EXPECT_EQ(load_error(j), "model.merges[3]: \"Ġthe Ġt\" makes \"ĠtheĠt\", which is not in model.vocab");
  j = gpt2_json();
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(load_error(j), "normalizer is {\"type\":\"NFC\"}: fp8kit does not implement normalizers");
  j = gpt2_json();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(load_error(j), "pre_tokenizer.add_prefix_space is true: fp8kit does not add a prefix space; set it to false");
  j = gpt2_json();
  j["model"]["vocab"]["a b"] = 260;
  EXPECT_EQ(load_error(j), "model.vocab[\"a b\"] is not a byte-level token (it has a character outside GPT-2's byte alphabet)");
  j = gpt2_json();
  j["model"]["vocab"].erase("he");
  j["model"]["merges"] = json::array();
  EXPECT_EQ(load_error(j), "id 257 is neither in model.vocab nor in added_tokens (ids must number the tokens from 0, without gaps)");
  j = gpt2_json();
  j["model"]["dropout"] = 0.1;
  EXPECT_EQ(load_error(j), "model.dropout is 0.1: fp8kit does not implement BPE dropout; set it to null");
  j = gpt2_json();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_EQ(load_error(j), "decoder.type is \"WordPiece\": a byte-level BPE decodes with ByteLevel");
  j = gpt2_json();
  j["added_tokens"][0]["lstrip"] = true;
  EXPECT_EQ(load_error(j), "added_tokens[0].lstrip is true: fp8kit matches added tokens exactly");
  j = gpt2_json();
  j["model"]["vocab"].erase("Ġ");
  j["model"]["vocab"]["ĠĠ"] = 220;
  j["model"]["merges"] = json::array();
  EXPECT_EQ(load_error(j), "model.vocab has no token \"Ġ\" for the byte 0x20; a byte-level BPE needs all 256 so "
                           "that any text can be encoded");

  json l = llama3_json();
  l["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+";
  EXPECT_EQ(load_error(l), "pre_tokenizer.pretokenizers[0].pattern.Regex is not a pattern fp8kit implements (GPT-2's or "
                           "Llama 3's): \"\\\\s+\"");
  l = llama3_json();
  l["post_processor"]["processors"][1]["type"] = "BertProcessing";
  EXPECT_EQ(load_error(l), "post_processor.processors[1].type is \"BertProcessing\": fp8kit reads ByteLevel and "
                           "TemplateProcessing post-processors, or a Sequence of them");
  // Nested deeper than a recursive printer's stack: named by type, not printed.
  const std::string deep = llama3_json().dump();
  const size_t at = deep.find("\"normalizer\":null");
  ASSERT_NE(at, std::string::npos);
  const fs::path nested = write_text("nested.json", deep.substr(0, at) + "\"normalizer\":" + std::string(200000, '[') +
                                                        std::string(200000, ']') + deep.substr(at + 17));
  EXPECT_EQ(error_of([&] { BpeTokenizer::load(nested); }),
            nested.string() + ": normalizer is an array: fp8kit does not implement normalizers");
  l = llama3_json();
  l["added_tokens"][1]["id"] = 5000;
  EXPECT_EQ(load_error(l), "added_tokens[1]: id 5000 is outside 0..261 (ids must number the tokens from 0, without gaps)");
}

}  // namespace
}  // namespace fp8kit::text
