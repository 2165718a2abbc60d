"""Model parity with transformers' Llama both ways, the numpy reference (llama_reference.py) standing
in for its forward pass: a model that `fp8kit lm train` saves loads there (config.json through
transformers' LlamaConfig, weights through safetensors, tokenizer.json and tokenizer_config.json
through transformers' AutoTokenizer) and gives `fp8kit lm eval`'s loss and `lm generate`'s greedy
tokens; and models written as transformers' save_pretrained writes them (its LlamaConfig, f32, bf16
and f16 weights, one file or huggingface_hub's shards and index; a tokenizer that puts a BOS first)
load in fp8kit and give the reference's loss and tokens, the BOS first as in transformers."""
import json
import os
import re

import numpy as np
from safetensors import TensorSpec, serialize_file
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer, processors
from tokenizers.implementations import ByteLevelBPETokenizer
from transformers import AutoTokenizer, LlamaConfig

import interop
import llama_reference as ref
from interop import fp8kit

TEXT = ("The movie was wonderful, and the music! I'd watch it again in 1999 or 2025... café naïve 😀 "
        "but the ending was dull and boring.\n\nA terrible, awful film; the worst.")


def hf_ids(tokenizer, text, add_special_tokens=False):
    """HF's ids of text; with add_special_tokens, as a model's input (after a BOS where the template puts one)."""
    tokenizer.encode_special_tokens = True  # fp8kit reads "<|endoftext|>" in text as text
    return tokenizer.encode(text, add_special_tokens=add_special_tokens).ids


def eos_id(tokenizer):
    """GPT-2's end of text, or Llama 3's."""
    return next(i for i in map(tokenizer.token_to_id, ("<|endoftext|>", "<|end_of_text|>")) if i is not None)


def fp8kit_eval(model_dir, text_file, seq):
    out = fp8kit("lm", "eval", "--model", model_dir, "--text", text_file, "--seq", str(seq), "--batch", "1",
                 "--precision", "fp32").decode()
    m = re.search(r"loss ([0-9.]+), perplexity [0-9.]+ over (\d+) tokens", out)
    assert m, out
    return float(m.group(1)), int(m.group(2))


def reference_eval(model, ids, seq):
    """lm eval's windows: seq + 1 tokens starting at multiples of seq, the last partial one dropped."""
    count = (len(ids) - 1) // seq
    return np.mean([model.loss(ids[w * seq: w * seq + seq + 1]) for w in range(count)]), count * seq


def reference_generate(model, tokenizer, prompt, new_tokens):
    """Greedy tokens over the tokenizer's vocabulary until EOS; stops early (flagged) at a near tie:
    lm generate runs the inference engine in bf16 (f32 and f16 weights rounded to bf16), whose logits
    differ from these by up to a few hundredths on these random models."""
    ids = hf_ids(tokenizer, prompt, add_special_tokens=True)
    vocab, eos = tokenizer.get_vocab_size(), eos_id(tokenizer)
    out = []
    for _ in range(new_tokens):
        logits = model.logits(ids[-model.config.max_position_embeddings:])[-1][:vocab]
        top2 = np.sort(logits)[-2:]
        if top2[1] - top2[0] < 0.3:
            return out, True  # bf16 and float64 may pick differently: compare up to here
        token = int(np.argmax(logits))
        if token == eos:
            break
        ids.append(token)
        out.append(token)
    return out, False


class ModelParity(interop.TempDirTest):
    def check_eval_and_generate(self, model_dir, model, tokenizer):
        text_file = os.path.join(self.tmp, "text.txt")
        with open(text_file, "w", encoding="utf-8") as f:
            f.write(TEXT)
        ids = hf_ids(tokenizer, TEXT, add_special_tokens=True) + [eos_id(tokenizer)]
        for seq in (8, 24):
            loss, tokens = fp8kit_eval(model_dir, text_file, seq)
            want, want_tokens = reference_eval(model, ids, seq)
            self.assertEqual(tokens, want_tokens)
            self.assertAlmostEqual(loss, want, delta=1e-4, msg=f"seq {seq}")
        for prompt in ("the movie", "A terrible café"):
            out = fp8kit("lm", "generate", "--model", model_dir, "--max-new-tokens", "12", prompt)
            tokens, tie = reference_generate(model, tokenizer, prompt, 12)
            want = prompt.encode() + b"".join(interop.token_bytes(tokenizer, t) for t in tokens)
            if tie:
                self.assertTrue(out.startswith(want), (out, want))
            else:
                self.assertEqual(out, want + b"\n")

    def test_fp8kit_trained_model_matches_transformers_llama(self):
        data = interop.make_tiny_imdb(self.tmp)
        # The tiny preset as transformers 5 writes its config, f32 weights, a RoPE theta not the default.
        config_dir = os.path.join(self.tmp, "config")
        LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=50000.0,
                    tie_word_embeddings=True, dtype="float32").save_pretrained(config_dir)
        run = os.path.join(self.tmp, "run")
        fp8kit("lm", "train", "--config", os.path.join(config_dir, "config.json"), "--precision", "fp32", "--data", data,
               "--out", run, "--vocab-size", "300", "--seq", "32", "--batch", "2", "--steps", "30", "--warmup", "3",
               "--eval-batches", "1", "--lr", "3e-3")
        model_dir = os.path.join(run, "model-fp32")

        config = LlamaConfig.from_pretrained(model_dir)
        self.assertEqual(config.rope_parameters, {"rope_type": "default", "rope_theta": 50000.0})
        self.assertEqual((config.num_key_value_heads, config.head_dim, config.tie_word_embeddings), (2, 16, True))
        self.assertEqual(config.dtype, "float32")
        eos = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json")).token_to_id("<|endoftext|>")
        self.assertEqual((config.bos_token_id, config.eos_token_id), (eos, eos))

        # The saved f32 weights are the trained masters of the checkpoint, bit for bit, under the same names.
        saved = load_file(os.path.join(model_dir, "model.safetensors"))
        masters = load_file(os.path.join(run, "checkpoint-fp32.safetensors"))
        for name, value in saved.items():
            self.assertEqual(value.dtype, np.float32)
            np.testing.assert_array_equal(value, masters[name], err_msg=name)

        # transformers' AutoTokenizer reads the directory as fp8kit does: the same ids, the exact text back
        # (no clean-up of " ." on decode), <|endoftext|> as BOS and EOS, the context length.
        auto = AutoTokenizer.from_pretrained(model_dir)
        tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        text = TEXT + " spaces . before , punctuation ' s"
        self.assertEqual(auto(text, add_special_tokens=False)["input_ids"], hf_ids(tokenizer, text))
        self.assertEqual(auto.decode(hf_ids(tokenizer, text)), text)
        self.assertEqual((auto.eos_token, auto.eos_token_id, auto.bos_token_id), ("<|endoftext|>", eos, eos))
        self.assertEqual(auto.model_max_length, config.max_position_embeddings)

        self.check_eval_and_generate(model_dir, ref.Llama(model_dir), tokenizer)

    def hf_model_dir(self, name, dtype, max_shard_size, tie, bos=False):
        """A random Llama as transformers' save_pretrained writes it, with a tokenizer trained by HF tokenizers
        (with bos, Llama 3's special tokens and the template that puts <|begin_of_text|> before a text)."""
        directory = os.path.join(self.tmp, name)
        trained = ByteLevelBPETokenizer()
        trained.train_from_iterator([TEXT] * 3 + ["the movie was great and the film was awful"] * 3, vocab_size=300,
                                    min_frequency=2,
                                    special_tokens=["<|begin_of_text|>", "<|end_of_text|>"] if bos else ["<|endoftext|>"])
        if bos:
            trained.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                                   special_tokens=[("<|begin_of_text|>", 0)])
        vocab = trained.get_vocab_size() + 5  # padded, as real models' embeddings often are
        # GQA, head_dim not hidden / heads, plain RoPE of another theta.
        config = LlamaConfig(vocab_size=vocab, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                             rms_norm_eps=1e-6, rope_theta=1000.0, tie_word_embeddings=tie, dtype=dtype,
                             bos_token_id=0, eos_token_id=1 if bos else 0)
        config.save_pretrained(directory)
        trained.save(os.path.join(directory, "tokenizer.json"))
        rng = np.random.default_rng(len(name))
        state = {}  # transformers' state-dict order
        for weight, shape in ref.weight_shapes(config).items():
            if weight.endswith("norm.weight"):
                state[weight] = 1 + rng.normal(0, 0.1, shape)
            else:
                state[weight] = rng.normal(0, 1.0 if weight == "model.embed_tokens.weight" else 0.3, shape)
        state = {k: ref.f32_to_bf16(v) if dtype == "bfloat16" else v.astype(np.dtype(dtype)) for k, v in state.items()}
        split = interop.hf_shards(state, max_shard_size)
        for file, names in split.filename_to_tensors.items():
            path = os.path.join(directory, file)
            if dtype == "bfloat16":
                # numpy has no bfloat16: the bits go in as safetensors' BF16 from their buffers.
                serialize_file({n: TensorSpec(dtype="bfloat16", shape=list(state[n].shape), data_ptr=state[n].ctypes.data,
                                              data_len=state[n].nbytes) for n in names}, path, metadata={"format": "pt"})
            else:
                save_file({n: state[n] for n in names}, path, metadata={"format": "pt"})
        if split.is_sharded:
            index = {"metadata": {"total_parameters": sum(v.size for v in state.values()), **split.metadata},
                     "weight_map": split.tensor_to_filename}
            with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
                f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
        return directory, split

    def test_transformers_written_models_load_in_fp8kit(self):
        for name, dtype, shard, tie, bos in (("f32", "float32", "5GB", True, False),
                                             ("bf16", "bfloat16", "5GB", False, False),
                                             ("bf16-sharded", "bfloat16", 12_000, False, False),
                                             ("f16-sharded-bos", "float16", 12_000, True, True)):
            with self.subTest(model=name):
                directory, split = self.hf_model_dir(name, dtype, shard, tie, bos)
                self.assertEqual(split.is_sharded, "sharded" in name)
                self.check_eval_and_generate(directory, ref.Llama(directory),
                                             Tokenizer.from_file(os.path.join(directory, "tokenizer.json")))


if __name__ == "__main__":
    interop.main()
