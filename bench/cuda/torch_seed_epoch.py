# Baseline for bench_cuda_seed_epoch: the seed model trained eagerly in PyTorch on the same GPU
# (batch 32 x 200 tokens, 625 steps = one IMDB epoch, random tokens and labels, Adam). It is the
# "established framework's eager GPU training" that issue 5 compares against; not part of the build.
# Usage (on the GPU machine): python3 bench/cuda/torch_seed_epoch.py [steps]
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class SeedClassifier(nn.Module):
    """The seed's 653,953-parameter Transformer classifier (Keras semantics: post-LN decoder block)."""

    def __init__(self, vocab=20000, length=200, dim=32, heads=2, ffn=32, dropout=0.1):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.token, self.position = nn.Embedding(vocab, dim), nn.Embedding(length, dim)
        self.query, self.key, self.value, self.out = (nn.Linear(dim, dim) for _ in range(4))
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-5), nn.LayerNorm(dim, eps=1e-5)
        self.ffn1, self.ffn2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.dense, self.dense_1 = nn.Linear(dim, 32), nn.Linear(32, 1)

    def forward(self, ids):
        batch, length = ids.shape
        p = self.dropout if self.training else 0.0
        x = self.token(ids) + self.position(torch.arange(length, device=ids.device))
        x = F.dropout(x, p, self.training)

        def split(t):  # [batch, length, dim] -> [batch, heads, length, head_dim]
            return t.view(batch, length, self.heads, -1).transpose(1, 2)

        a = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)),
                                           dropout_p=p, is_causal=True)
        a = self.out(a.transpose(1, 2).reshape(batch, length, -1))
        x = self.norm1(x + F.dropout(a, p, self.training))
        f = self.ffn2(F.relu(self.ffn1(x)))
        x = self.norm2(x + F.dropout(f, p, self.training))
        x = F.dropout(x.mean(dim=1), p, self.training)
        x = F.dropout(F.relu(self.dense(x)), p, self.training)
        return torch.sigmoid(self.dense_1(x)).squeeze(-1)


def epoch_seconds(precision, steps, batch=32, length=200):
    torch.manual_seed(0)
    model = SeedClassifier().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    ids = torch.randint(0, 20000, (steps, batch, length), device="cuda")
    labels = torch.randint(0, 2, (steps, batch), device="cuda").float()

    def step(i):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            probs = model(ids[i])
        loss = F.binary_cross_entropy(probs.float().clamp(1e-7, 1 - 1e-7), labels[i])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for i in range(50):  # warm-up: kernels chosen, allocator settled
        step(i % steps)
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for i in range(steps):
        step(i)
    torch.cuda.synchronize()
    return time.perf_counter() - begin


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 625
    print(f"PyTorch {torch.__version__} eager, {torch.cuda.get_device_name()}, {steps} steps of batch 32")
    print(f"{'precision':<10}{'s/epoch':>10}{'us/step':>10}")
    for precision in ("fp32", "bf16"):
        runs = sorted(epoch_seconds(precision, steps) for _ in range(3))
        print(f"{precision:<10}{runs[1]:>10.3f}{runs[1] / steps * 1e6:>10.1f}")
