"""Tokenizer parity with Hugging Face `tokenizers` (and transformers' fast tokenizer): tokenizer.json
files that fp8kit learns load there and give the same ids on many strings (Unicode, emoji, runs of
whitespace, contractions, digits, added tokens as text or parsed) and decode back, invalid UTF-8
included; tokenizer.json files that `tokenizers` trains (GPT-2's shape with an added token that is
not special, Llama 3's) load in fp8kit and encode the same, and fp8kit's copy of Llama 3's keeps the
template that puts its BOS first."""
import os
import random

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from tokenizers.implementations import ByteLevelBPETokenizer

import interop
from interop import fp8kit

FIXED = [
    "a", "the movie was great", "  leading spaces", "trailing spaces   ", "multiple     spaces inside",
    "\ttabs\t\tand\n\nnewlines\r\n", " \n \n  ", "I'm sure they'll say it's what we'd've done, DON'T",
    "HELLO World MiXeD", "1234567890 3.14159 1,000,000", "emoji 😀🎉 👍🏽 family 👨‍👩‍👧 flag 🇫🇷",
    "日本語のテキストと中文", "Ελληνικά κείμενο", "café naïve résumé", "e\u0301 combining", "nbsp\u00a0here",
    "line\u2028separator", "zero\u200bwidth", "<br /><br />html", "$3.50 & 100% !!! ???", "a<|endoftext|>b",
    "<|endoftext|>", "a <movie> and<movie>", "ﬁ ligature", "",
]


def random_strings(rng, count):
    """Strings drawn from ASCII, whitespace, Latin-1, CJK, emoji and combining marks."""
    pools = ["abcdefghijklmnopqrstuvwxyz", "ABCXYZ", "0123456789", " ", "  \t\n\r", ".,'!?-_\"()",
             "éèàüößçñ", "日本語中文한국어", "😀🎉👍🏽🇫🇷", "\u0301\u0308\u200d", "'s't're've'm'll'd"]
    return ["".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 40))) for _ in range(count)]


def fp8kit_ids(tokenizer_json, texts, special=False):
    """`fp8kit tokenize --tokenizer` ids of each text (str or bytes), in one run."""
    args = ["tokenize", "--tokenizer", tokenizer_json] + (["--special"] if special else []) + ["--"] + list(texts)
    out = fp8kit(*args)
    lines = [line for line in out.split(b"\n") if line.startswith(b"Tokens:")]
    assert len(lines) == len(texts), out[-2000:]
    return [[int(t) for t in line[len(b"Tokens:"):].split()] for line in lines]


class TokenizerParity(interop.TempDirTest):
    def setUp(self):
        super().setUp()
        self.data = interop.make_tiny_imdb(self.tmp)
        self.texts = FIXED + random_strings(random.Random(1), 300) + self.reviews()

    def reviews(self):
        folder = os.path.join(self.data, "test", "pos")
        texts = []
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                texts.append(f.read())
        return texts

    def assert_same_ids(self, path, hf, texts):
        ours = fp8kit_ids(path, texts)
        hf.encode_special_tokens = True  # fp8kit's default: "<|endoftext|>" in text is ordinary text
        for text, ids in zip(texts, ours):
            with self.subTest(text=text):
                self.assertEqual(hf.encode(text, add_special_tokens=False).ids, ids)
                self.assertEqual(hf.decode(ids, skip_special_tokens=False), text)
        hf.encode_special_tokens = False  # --special: added tokens in text are those tokens, as HF's default
        for text, ids in zip(texts, fp8kit_ids(path, texts, special=True)):
            with self.subTest(text=text, special=True):
                self.assertEqual(hf.encode(text, add_special_tokens=False).ids, ids)

    def test_fp8kit_tokenizers_load_in_hf_and_encode_the_same(self):
        for pattern in ("gpt2", "llama3"):
            with self.subTest(pattern=pattern):
                path = os.path.join(self.tmp, f"fp8kit-{pattern}.json")
                fp8kit("vocab", "--kind", "bpe", "--data", self.data, "--size", "600", "--pattern", pattern,
                       "--out", path)
                hf = Tokenizer.from_file(path)
                self.assertGreater(hf.get_vocab_size(), 300)  # merges learned (a tiny corpus stops before 600)
                self.assertEqual(hf.token_to_id("<|endoftext|>"), 0)
                self.assert_same_ids(path, hf, self.texts)

    def test_invalid_utf8_encodes_to_bytes_that_hf_decodes(self):
        path = os.path.join(self.tmp, "fp8kit.json")
        fp8kit("vocab", "--kind", "bpe", "--data", self.data, "--size", "400", "--out", path)
        hf = Tokenizer.from_file(path)
        raw = [b"caf\xe9", b"\xff\xfe bytes", b"cut \xe6\x97", b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong",
               b"ok \xf0\x9f\x98\x80 \xf0\x9f\x98", b"\x80\x80\x80", b"\xf4\x90\x80\x80 past U+10FFFF"]
        for text, ids in zip(raw, fp8kit_ids(path, raw)):
            with self.subTest(text=text):
                self.assertEqual(b"".join(interop.token_bytes(hf, i) for i in ids), text)
                # HF decodes bytes with from_utf8_lossy, as Python's "replace" does (maximal subparts).
                self.assertEqual(hf.decode(ids), text.decode("utf-8", errors="replace"))

    def test_hf_trained_gpt2_tokenizer_loads_in_fp8kit(self):
        trained = ByteLevelBPETokenizer()
        corpus = self.reviews() + self.texts[:100]
        trained.train_from_iterator(corpus, vocab_size=500, min_frequency=2, special_tokens=["<|endoftext|>"])
        trained.add_tokens(["<movie>"])  # not special: matched even where special tokens are text
        path = os.path.join(self.tmp, "hf-gpt2.json")
        trained.save(path)
        self.assert_same_ids(path, Tokenizer.from_file(path), self.texts)

    def test_hf_trained_llama3_tokenizer_loads_in_fp8kit(self):
        # Llama 3's shape: Split(its regex, isolated) then ByteLevel without a regex of its own, BOS by a template.
        llama3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
        hf = Tokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(llama3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        hf.decoder = decoders.ByteLevel()
        hf.train_from_iterator(self.reviews() + self.texts[:100], trainers.BpeTrainer(
            vocab_size=500, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        # Llama 3 adds BOS by a template; fp8kit (and add_special_tokens=False) add none.
        hf.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                          special_tokens=[("<|begin_of_text|>", 0)])
        path = os.path.join(self.tmp, "hf-llama3.json")
        hf.save(path)
        self.assert_same_ids(path, Tokenizer.from_file(path), self.texts)
        # fp8kit keeps the template's BOS: the copy `lm train` saves beside its model starts texts the same.
        run = os.path.join(self.tmp, "run")
        fp8kit("lm", "train", "--config", "tiny", "--tokenizer", path, "--data", self.data, "--out", run, "--seq", "16",
               "--batch", "1", "--steps", "1", "--warmup", "0", "--eval-batches", "1", "--precision", "fp32")
        saved = Tokenizer.from_file(os.path.join(run, "model-fp32", "tokenizer.json"))
        for text in self.texts:
            self.assertEqual(saved.encode(text).ids, hf.encode(text).ids)
            self.assertEqual(saved.encode(text).ids[0], hf.token_to_id("<|begin_of_text|>"))


if __name__ == "__main__":
    interop.main()
