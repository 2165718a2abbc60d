"""safetensors parity: the model directory `fp8kit lm train` saves (BF16 by default) reads with the
safetensors package under transformers' names and shapes, each value the trained f32 master rounded
to nearest even; a sharded save is cut as huggingface_hub cuts the same state dict for transformers'
save_pretrained, its index byte for byte as transformers writes it, its shards holding the same
tensors as the single file."""
import json
import os
import shutil

import numpy as np
from safetensors import deserialize, safe_open
from safetensors.numpy import load_file
from transformers import LlamaConfig

import interop
import llama_reference as ref
from interop import fp8kit


def read_raw(path):
    """name -> (dtype, shape, bytes), parsed by safetensors itself (numpy has no bfloat16)."""
    with open(path, "rb") as f:
        return {name: (t["dtype"], tuple(t["shape"]), bytes(t["data"])) for name, t in deserialize(f.read())}


class SafetensorsParity(interop.TempDirTest):
    def test_fp8kit_model_files_read_with_safetensors(self):
        data = interop.make_tiny_imdb(self.tmp)
        run = os.path.join(self.tmp, "run")
        train = ["lm", "train", "--config", "tiny", "--precision", "fp32", "--data", data, "--out", run, "--vocab-size",
                 "300", "--seq", "32", "--batch", "2", "--steps", "3", "--warmup", "1", "--eval-batches", "1"]
        model_dir = os.path.join(run, "model-fp32")
        fp8kit(*train, "--max-shard-size", "20000")
        sharded = os.path.join(self.tmp, "sharded")
        shutil.copytree(model_dir, sharded)
        fp8kit(*train, "--resume")  # no steps left: the same weights saved again, in one file
        self.assertFalse(os.path.exists(os.path.join(model_dir, "model.safetensors.index.json")))

        config = LlamaConfig.from_pretrained(model_dir)
        shapes = ref.weight_shapes(config)
        masters = load_file(os.path.join(run, "checkpoint-fp32.safetensors"))  # the trained f32 weights
        single = os.path.join(model_dir, "model.safetensors")
        with safe_open(single, framework="numpy") as f:
            self.assertEqual(f.metadata(), {"format": "pt"})  # transformers refuses files without it
            self.assertEqual(sorted(f.keys()), sorted(shapes))
        tensors = read_raw(single)
        for name, shape in shapes.items():
            dtype, got_shape, data = tensors[name]
            self.assertEqual((dtype, got_shape), ("BF16", shape), name)
            np.testing.assert_array_equal(np.frombuffer(data, np.uint16).reshape(shape),
                                          ref.f32_to_bf16(masters[name]), err_msg=name)

        # Shards: huggingface_hub's split of the same state dict (transformers' order, bf16 sizes).
        split = interop.hf_shards({n: np.zeros(s, np.uint16) for n, s in shapes.items()}, 20000)
        self.assertTrue(split.is_sharded)
        with open(os.path.join(sharded, "model.safetensors.index.json")) as f:
            index_text = f.read()
        index = {"metadata": {"total_parameters": sum(int(np.prod(s)) for s in shapes.values()), **split.metadata},
                 "weight_map": split.tensor_to_filename}
        self.assertEqual(index_text, json.dumps(index, indent=2, sort_keys=True) + "\n")
        self.assertEqual(sorted(n for n in os.listdir(sharded) if n.endswith(".safetensors")),
                         sorted(split.filename_to_tensors))
        for file, names in split.filename_to_tensors.items():
            path = os.path.join(sharded, file)
            with safe_open(path, framework="numpy") as f:
                self.assertEqual(f.metadata(), {"format": "pt"})
            shard = read_raw(path)
            self.assertEqual(sorted(shard), sorted(names))
            for name in names:
                self.assertEqual(shard[name], tensors[name], name)


if __name__ == "__main__":
    interop.main()
