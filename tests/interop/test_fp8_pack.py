"""FP8 packing parity: a random f32 Llama (config.json from transformers' LlamaConfig, weights from
safetensors.numpy) packed by `fp8kit lm pack` reads with the safetensors package under the names,
dtypes and shapes of the compressed-tensors layout (F8_E4M3 weights [out, in], F32 weight_scale,
input_scale, k_scale/v_scale) and vLLM's native one, config.json's quantization_config as those
projects spell it, and the E4M3 bytes, decoded here from the OCP definition, times their scales
within E4M3's rounding of the original weights. The calibration file is written here too, as a
plain safetensors file, so its format is checked from outside."""
import json
import os

import numpy as np
from safetensors import deserialize
from safetensors.numpy import save_file
from transformers import LlamaConfig

import interop
import llama_reference as ref
from interop import fp8kit

PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj")


def e4m3_to_f32(codes):
    """OCP E4M3 (float8_e4m3fn): bias 7, no infinities, S.1111.111 is NaN."""
    codes = codes.astype(np.int32)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent, mantissa = (codes >> 3) & 0xF, codes & 0x7
    values = np.where(exponent == 0, mantissa / 8.0 * 2.0 ** -6, (1 + mantissa / 8.0) * 2.0 ** (exponent - 7.0))
    values = np.where((codes & 0x7F) == 0x7F, np.nan, values)
    return (sign * values).astype(np.float32)


def read_raw(path):
    with open(path, "rb") as f:
        return {name: (t["dtype"], tuple(t["shape"]), bytes(t["data"])) for name, t in deserialize(f.read())}


class Fp8PackParity(interop.TempDirTest):
    def setUp(self):
        super().setUp()
        self.config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                  tie_word_embeddings=False)
        self.source = os.path.join(self.tmp, "source")
        self.config.save_pretrained(self.source)
        rng = np.random.default_rng(0)
        self.weights = {name: (rng.standard_normal(shape) * 0.05).astype(np.float32)
                        for name, shape in ref.weight_shapes(self.config).items()}
        self.weights["model.layers.0.mlp.up_proj.weight"][3, 5] = 7.0  # an outlier: per-channel scales differ
        save_file(self.weights, os.path.join(self.source, "model.safetensors"), metadata={"format": "pt"})

    def pack(self, name, *args):
        out = os.path.join(self.tmp, name)
        fp8kit("lm", "pack", "--model", self.source, "--out", out, *args)
        with open(os.path.join(out, "config.json")) as f:
            config = json.load(f)
        return out, read_raw(os.path.join(out, "model.safetensors")), config

    def check_weights(self, tensors, scale_shape, scale_suffix=".weight_scale"):
        for name, shape in ref.weight_shapes(self.config).items():
            module = name[: -len(".weight")]
            if not module.endswith(PROJECTIONS):
                self.assertEqual(tensors[name][:2], ("BF16", shape), name)
                bits = np.frombuffer(tensors[name][2], np.uint16).reshape(shape)
                np.testing.assert_array_equal(bits, ref.f32_to_bf16(self.weights[name]), err_msg=name)
                continue
            dtype, got_shape, data = tensors[name]
            self.assertEqual((dtype, got_shape), ("F8_E4M3", shape), name)
            s_dtype, s_shape, s_data = tensors[module + scale_suffix]
            self.assertEqual((s_dtype, s_shape), ("F32", scale_shape(shape)), module)
            scales = np.frombuffer(s_data, np.float32)
            self.assertTrue(np.all(np.isfinite(scales)) and np.all(scales > 0), module)
            decoded = e4m3_to_f32(np.frombuffer(data, np.uint8)).reshape(shape)
            yield module, decoded, scales.reshape(s_shape) if s_shape else scales.reshape(())

    def test_compressed_tensors_per_channel(self):
        out, tensors, config = self.pack("channel")
        for module, decoded, scales in self.check_weights(tensors, lambda s: (s[0], 1)):
            original = self.weights[module + ".weight"]
            # Per output channel: scale = the row's amax / 448, and code * scale within E4M3's rounding.
            np.testing.assert_allclose(scales[:, 0], np.abs(original).max(axis=1) / 448, rtol=1e-6, err_msg=module)
            error = np.abs(decoded * scales - original)
            self.assertTrue(np.all(error <= np.abs(original) / 16 + scales * 2.0 ** -10), module)
        q = config["quantization_config"]
        self.assertEqual(q["quant_method"], "compressed-tensors")
        self.assertEqual(q["format"], "float-quantized")
        self.assertEqual(q["ignore"], ["lm_head"])
        self.assertIsNone(q["kv_cache_scheme"])
        group = q["config_groups"]["group_0"]
        self.assertEqual(group["targets"], ["Linear"])
        self.assertEqual({k: group["weights"][k] for k in ("num_bits", "type", "strategy", "symmetric", "dynamic")},
                         {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False})
        self.assertEqual({k: group["input_activations"][k] for k in ("num_bits", "type", "strategy", "dynamic")},
                         {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True})
        self.assertEqual(config["hidden_size"], 64)  # the source config is kept
        self.assertEqual(LlamaConfig.from_pretrained(out).num_key_value_heads, 2)
        self.assertTrue(os.path.exists(os.path.join(out, "fp8kit_quantization.json")))

    def test_static_scales_blocks_and_the_vllm_form(self):
        calibration = os.path.join(self.tmp, "calibration.safetensors")
        stats = {}
        for i in range(self.config.num_hidden_layers):
            p = f"model.layers.{i}."
            for m, channels in (("self_attn.q_proj", 64), ("self_attn.k_proj", 64), ("self_attn.v_proj", 64),
                                ("self_attn.o_proj", 64), ("mlp.gate_proj", 64), ("mlp.up_proj", 64),
                                ("mlp.down_proj", 192), ("self_attn.k_cache", 32), ("self_attn.v_cache", 32)):
                stats[p + m + ".channel_amax"] = np.full(channels, 4.48, np.float32)
        save_file(stats, calibration, metadata={"format": "fp8kit-calibration", "version": "1", "prompts": "2",
                                                "tokens": "64", "source": "interop"})
        _, tensors, config = self.pack("static", "--calibration", calibration, "--weights", "tensor",
                                       "--activations", "static", "--kv-cache", "fp8")
        list(self.check_weights(tensors, lambda s: (1,)))
        for i in range(self.config.num_hidden_layers):
            for m in PROJECTIONS:
                self.assertEqual(tensors[f"model.layers.{i}.{m}.input_scale"][:2], ("F32", (1,)))
                np.testing.assert_allclose(np.frombuffer(tensors[f"model.layers.{i}.{m}.input_scale"][2], np.float32),
                                           [0.01], rtol=1e-6)
            for kv in ("k_scale", "v_scale"):
                self.assertEqual(tensors[f"model.layers.{i}.self_attn.{kv}"][:2], ("F32", (1,)))
        q = config["quantization_config"]
        self.assertEqual(q["config_groups"]["group_0"]["input_activations"]["strategy"], "tensor")
        self.assertFalse(q["config_groups"]["group_0"]["input_activations"]["dynamic"])
        self.assertEqual(q["kv_cache_scheme"]["strategy"], "tensor")

        _, tensors, config = self.pack("blocks", "--weights", "block", "--format", "vllm")
        list(self.check_weights(tensors, lambda s: (-(-s[0] // 128), -(-s[1] // 128)), ".weight_scale_inv"))
        self.assertEqual(config["quantization_config"],
                         {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                          "ignored_layers": ["lm_head"], "weight_block_size": [128, 128]})


if __name__ == "__main__":
    interop.main()
