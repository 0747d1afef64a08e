#!/usr/bin/env python3
"""PyTorch baselines for `moeforge bench prefill`, on the same geometry, token counts and number of
weight copies as MoeForge's run:
  * the expert layer on PyTorch's grouped GEMM (torch._grouped_mm): sort the routed (token, slot)
    pairs by expert, gather x, gate_up grouped GEMM, silu(gate) * up, down grouped GEMM, weight and
    add the k slots of each token (index_add_), bf16 in and out; graph-captured when capture works;
  * a dense cuBLAS GEMM with the layer's FLOPs ([M*k, H] x [H, 3I], bf16): the tensor-core ceiling.
One call per weight copy, as a model's layers would; CUDA events, warm-up, median of the timed
repetitions. Reads the workload as JSON on stdin, writes results as JSON on stdout."""
import json
import sys

import torch
import torch.nn.functional as F

from torch_timing import graphed, time_ms


def grouped_layer(x, w13, w2, ids, weights, experts):
    m, k = ids.shape
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    # each expert's end in the sorted pairs (searchsorted, not bincount: bincount reads its max back to the host)
    ends = torch.arange(1, experts + 1, device=x.device, dtype=flat.dtype)
    offs = torch.searchsorted(flat[order], ends).to(torch.int32)
    xs = x.index_select(0, order // k)
    gu = torch._grouped_mm(xs, w13.transpose(-2, -1), offs=offs)
    i = w13.shape[1] // 2
    inter = F.silu(gu[:, :i]) * gu[:, i:]
    out = torch._grouped_mm(inter, w2.transpose(-2, -1), offs=offs)
    out = out.float() * weights.flatten()[order].unsqueeze(1)
    y = torch.zeros(m, w2.shape[1], device=x.device, dtype=torch.float32)
    y.index_add_(0, order // k, out)
    return y.to(torch.bfloat16)


def main():
    spec = json.load(sys.stdin)
    dev = torch.device("cuda")
    h, i, e, k, copies = spec["hidden"], spec["intermediate"], spec["experts"], spec["topk"], spec["copies"]
    warmup, reps = spec["warmup"], spec["reps"]
    g = torch.Generator(device=dev).manual_seed(11)
    w13 = [(torch.rand(e, 2 * i, h, device=dev, generator=g) - 0.5).to(torch.bfloat16) for _ in range(copies)]
    w2 = [(torch.rand(e, h, i, device=dev, generator=g) - 0.5).to(torch.bfloat16) for _ in range(copies)]
    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "results": []}
    for m in spec["tokens"]:
        x = torch.randn(m, h, device=dev, generator=g).to(torch.bfloat16)
        routes = []
        for _ in range(copies):
            ids = torch.argsort(torch.rand(m, e, device=dev, generator=g), dim=1)[:, :k].to(torch.int64)
            weights = torch.softmax(torch.randn(m, k, device=dev, generator=g), dim=1)
            routes.append((ids, weights))

        def step():
            for c in range(copies):
                grouped_layer(x, w13[c], w2[c], routes[c][0], routes[c][1], e)

        replay = graphed(step)
        grouped_us = time_ms(replay or step, warmup, reps) / copies * 1000.0
        a = torch.randn(m * k, h, device=dev, generator=g).to(torch.bfloat16)
        bs = [torch.randn(h, 3 * i, device=dev, generator=g).to(torch.bfloat16) for _ in range(copies)]

        def dense():
            for b in bs:
                torch.mm(a, b)

        dense_replay = graphed(dense)
        dense_us = time_ms(dense_replay or dense, warmup, reps) / copies * 1000.0
        flops = 2.0 * m * k * 3 * h * i
        out["results"].append({"tokens": m, "grouped_mm_us": grouped_us, "grouped_mm_graphed": replay is not None,
                               "dense_gemm_us": dense_us, "dense_gemm_tflops": flops / dense_us / 1e6,
                               "dense_gemm_shape": [m * k, h, 3 * i]})
        del x, routes, a, bs
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
