"""What the interop tests share: the fp8kit binary (argv[1]), running it, a tiny aclImdb folder to
train on, and GPT-2's byte-level alphabet (token strings <-> bytes)."""
import os
import random
import subprocess
import sys
import tempfile
import unittest

from huggingface_hub import split_state_dict_into_shards_factory

CLI = None


def fp8kit(*args, check=True):
    """Runs fp8kit with `args` (str or bytes); returns its stdout as bytes, stderr folded in on failure."""
    r = subprocess.run([CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and r.returncode != 0:
        raise AssertionError(f"fp8kit {' '.join(map(str, args))} failed ({r.returncode}):\n"
                             f"{r.stdout.decode(errors='replace')[-2000:]}{r.stderr.decode(errors='replace')}")
    return r.stdout


def make_tiny_imdb(root, per_class=12):
    """<root>/aclImdb/{train,test}/{neg,pos}/<i>_<rating>.txt: short reviews of telling words (as
    tests/common/tiny_imdb.h makes them), with some punctuation, digits and non-ASCII text."""
    rng = random.Random(0)
    words = {"pos": ["great", "wonderful", "excellent", "loved", "amazing", "superb"],
             "neg": ["awful", "terrible", "boring", "hated", "worst", "dull"]}
    common = ["the", "movie", "film", "was", "and", "a", "of", "it", "this", "isn't", "1999", "café", "naïve", "!",
              "😀", "日本語", "  ", "\t", "\n\n", "Ελληνικά", "they'll", "$3.50"]
    for split in ("train", "test"):
        for label in ("neg", "pos"):
            folder = os.path.join(root, "aclImdb", split, label)
            os.makedirs(folder, exist_ok=True)
            for i in range(per_class):
                text = " ".join(rng.choice(words[label] + common) for _ in range(40)) + ". <br /><br />"
                with open(os.path.join(folder, f"{i}_{8 if label == 'pos' else 2}.txt"), "w", encoding="utf-8") as f:
                    f.write(text)
    return os.path.join(root, "aclImdb")


def _byte_alphabet():
    # GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest for chars from U+0100 on.
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


BYTE_TO_CHAR = _byte_alphabet()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def token_bytes(tokenizer, token_id):
    """The bytes of a token of an HF `tokenizers.Tokenizer` (an added token: its UTF-8 content)."""
    token = tokenizer.id_to_token(token_id)
    if token_id in tokenizer.get_added_tokens_decoder():
        return token.encode()
    return bytes(CHAR_TO_BYTE[c] for c in token)


def hf_shards(state, max_shard_size):
    """The shards transformers' save_pretrained cuts a state dict into (huggingface_hub's split; the
    tensors' byte sizes, in the state dict's order)."""
    return split_state_dict_into_shards_factory(state, get_storage_size=lambda t: t.nbytes, max_shard_size=max_shard_size,
                                                filename_pattern="model{suffix}.safetensors")


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="fp8kit_interop_")
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()


def main():
    global CLI
    CLI = sys.argv.pop(1)
    unittest.main(verbosity=2)
