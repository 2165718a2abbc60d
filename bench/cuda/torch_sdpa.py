"""PyTorch's SDPA through its cuDNN backend at bench_cuda_sdpa's shape (batch 4, seq 4096, 32 query heads
of 128, causal, bf16; 32 or 8 KV heads), the figure issue 11's attention targets come from, measured
the way bench_cuda_sdpa measures fp8kit's: per call, from CUDA events around a CUDA graph of 50 calls
(median of 5 replays; the backward, which autograd cannot capture, as 50 eager calls), causal FLOPs (forward 2 GEMMs of b*h*s*s*d, backward 2.5 times that).

Forward three ways: without autograd (cuDNN's inference mode: no softmax statistics written), with
q, k, v requiring gradients (training mode: the statistics the backward needs), and from q, k, v laid
out [batch, seq, heads, dim] (the Linear's output, transposed as a view, as fp8kit lays them out)
instead of contiguous [batch, heads, seq, dim]. Run: python3 bench/cuda/torch_sdpa.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, S, H, D = 4, 4096, 32, 128


def per_call_ms(fn, calls=50, replays=5, graph=True):
    stream = torch.cuda.Stream()  # warm-up off the default stream, as graph capture wants
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            for _ in range(calls):
                fn()
        run = captured.replay
    else:  # autograd's backward does not capture: eager calls (milliseconds each, launches hidden)
        def run():
            for _ in range(calls):
                fn()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def tensors(kv_heads, layout, grad):
    def make(heads):
        if layout == "bshd":  # [b, s, h, d] storage viewed as [b, h, s, d]
            t = torch.randn(B, S, heads, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        else:
            t = torch.randn(B, heads, S, D, device="cuda", dtype=torch.bfloat16)
        return t.detach().requires_grad_(grad)
    return make(H), make(kv_heads), make(kv_heads)


def main():
    forward_flops = 2.0 * 2.0 * B * H * S * S * D / 2.0
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for kv in (32, 8):
            gqa = kv != H
            for layout in ("bhsd", "bshd"):
                q, k, v = tensors(kv, layout, False)
                with torch.no_grad():
                    ms = per_call_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa))
                print(f"kv_heads {kv:2d} {layout} forward, no autograd (inference): {ms:.3f} ms, "
                      f"{forward_flops / ms / 1e9:.0f} TFLOP/s")
                q, k, v = tensors(kv, layout, True)
                ms = per_call_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa))
                print(f"kv_heads {kv:2d} {layout} forward, q/k/v requiring grad (training): {ms:.3f} ms, "
                      f"{forward_flops / ms / 1e9:.0f} TFLOP/s")
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
                dout = torch.randn_like(out)
                ms = per_call_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), graph=False)
                print(f"kv_heads {kv:2d} {layout} backward: {ms:.3f} ms, {2.5 * forward_flops / ms / 1e9:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
