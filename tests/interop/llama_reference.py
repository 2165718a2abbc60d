"""A numpy Llama written from transformers' modeling_llama (LlamaForCausalLM, eager attention), in
float64, standing in for transformers' model where torch is not installed (PyPI's Linux torch pulls
~3 GB of CUDA wheels); reads an HF model directory with safetensors and transformers' LlamaConfig."""
import json
import os

import numpy as np
from safetensors import safe_open
from transformers import LlamaConfig


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values):
    """Round to nearest even, as torch's .to(torch.bfloat16) (finite values)."""
    u = values.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def read_tensors(path):
    """name -> array of a safetensors file (F32, F16, or BF16 widened to float32), read by safetensors."""
    out = {}
    with safe_open(path, framework="numpy") as f:
        for name in f.keys():
            view = f.get_slice(name)
            dtype, shape = view.get_dtype(), view.get_shape()
            if dtype in ("F32", "F16"):
                out[name] = f.get_tensor(name)
            else:
                assert dtype == "BF16", f"{path}: {name} is {dtype}"
                out[name] = bf16_to_f32(_raw(path, name).view(np.uint16)).reshape(shape)
    return out


def _raw(path, name):
    """A tensor's bytes, located by the file's own header (numpy has no bfloat16)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        begin, end = header[name]["data_offsets"]
        f.seek(8 + n + begin)
        return np.frombuffer(f.read(end - begin), dtype=np.uint8)


def read_model_weights(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if not os.path.exists(os.path.join(directory, "model.safetensors")) and os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for file in files:
        weights.update(read_tensors(os.path.join(directory, file)))
    return weights


def weight_shapes(config):
    """name -> shape of LlamaForCausalLM's saved weights, in its state dict's order (modules as
    modeling_llama registers them; a tied lm_head is not saved)."""
    hd = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    h, f = config.hidden_size, config.intermediate_size
    q, kv = config.num_attention_heads * hd, config.num_key_value_heads * hd
    shapes = {"model.embed_tokens.weight": (config.vocab_size, h)}
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                       p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                       p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                       p + "mlp.down_proj.weight": (h, f), p + "input_layernorm.weight": (h,),
                       p + "post_attention_layernorm.weight": (h,)})
    shapes["model.norm.weight"] = (h,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, h)
    return shapes


class Llama:
    def __init__(self, directory):
        self.config = LlamaConfig.from_pretrained(directory)
        self.w = {k: v.astype(np.float64) for k, v in read_model_weights(directory).items()}

    def _rms_norm(self, x, weight):
        # LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then the weight.
        return weight * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.config.rms_norm_eps))

    def _rope(self, x, positions):
        # The default rotary embedding; rotate_half pairs dimension i with i + head_dim / 2.
        d = x.shape[-1]
        theta = self.config.rope_parameters["rope_theta"]
        inv_freq = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
        freqs = np.outer(positions, inv_freq)
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos, sin = np.cos(emb), np.sin(emb)
        rotated = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], axis=-1)
        return x * cos + rotated * sin

    def logits(self, ids):
        """[T, vocab] next-token logits of one sequence."""
        c, w = self.config, self.w
        T = len(ids)
        heads, kv_heads = c.num_attention_heads, c.num_key_value_heads
        hd = getattr(c, "head_dim", None) or c.hidden_size // heads
        x = w["model.embed_tokens.weight"][np.asarray(ids)]
        positions = np.arange(T, dtype=np.float64)
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}."
            h = self._rms_norm(x, w[p + "input_layernorm.weight"])
            q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, heads, hd).transpose(1, 0, 2)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, kv_heads, hd).transpose(1, 0, 2)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, kv_heads, hd).transpose(1, 0, 2)
            q, k = self._rope(q, positions), self._rope(k, positions)
            k = np.repeat(k, heads // kv_heads, axis=0)  # repeat_kv
            v = np.repeat(v, heads // kv_heads, axis=0)
            scores = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            attn = (scores / scores.sum(axis=-1, keepdims=True)) @ v
            x = x + attn.transpose(1, 0, 2).reshape(T, heads * hd) @ w[p + "self_attn.o_proj.weight"].T
            h = self._rms_norm(x, w[p + "post_attention_layernorm.weight"])
            gate = h @ w[p + "mlp.gate_proj.weight"].T
            up = h @ w[p + "mlp.up_proj.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
        x = self._rms_norm(x, w["model.norm.weight"])
        head = w["model.embed_tokens.weight"] if c.tie_word_embeddings else w["lm_head.weight"]
        return x @ head.T

    def loss(self, ids):
        """Mean next-token cross-entropy over ids[1:] given ids[:-1] (nats)."""
        logits = self.logits(ids[:-1])
        m = logits.max(axis=-1, keepdims=True)
        logp = logits - (m + np.log(np.exp(logits - m).sum(axis=-1, keepdims=True)))
        return -np.mean(logp[np.arange(len(ids) - 1), ids[1:]])
