#!/usr/bin/env python3
"""PyTorch baseline for `moeforge bench router`: matmul + softmax + top-k (+ renormalisation or
bias, as each shape's rule) in bf16 weights / fp32 scores, eager and CUDA-graph-captured, with the
same rotation of router weights as MoeForge's run. CUDA events, warm-up, median of the timed
repetitions. Reads the shapes as JSON on stdin, writes results as JSON on stdout."""
import json
import sys

import torch

from torch_timing import graphed, time_ms


def rule_fn(rule, k, bias):
    def softmax_renorm(s):
        p = torch.softmax(s, dim=-1)
        w, i = torch.topk(p, k, dim=-1)
        return w / w.sum(dim=-1, keepdim=True), i

    def softmax_topk(s):
        return torch.topk(torch.softmax(s, dim=-1), k, dim=-1)

    def topk_softmax(s):
        w, i = torch.topk(s, k, dim=-1)
        return torch.softmax(w, dim=-1), i

    def biased_topk_softmax(s):
        w, i = torch.topk(s + bias, k, dim=-1)
        return torch.softmax(w, dim=-1), i

    def grouped_sigmoid(s):  # DeepSeek-V3 (groups 8, top-4 groups, scaling 2.5), as transformers computes it
        p = torch.sigmoid(s)
        sel = p + bias
        g = sel.view(s.shape[0], 8, -1).topk(2, dim=-1)[0].sum(dim=-1)
        keep = torch.zeros_like(g).scatter_(1, torch.topk(g, 4, dim=-1)[1], 1)
        mask = keep.unsqueeze(-1).expand(s.shape[0], 8, s.shape[1] // 8).reshape(s.shape[0], -1)
        i = torch.topk(sel.masked_fill(mask == 0, 0.0), k, dim=-1)[1]
        w = p.gather(1, i)
        return w / w.sum(dim=-1, keepdim=True) * 2.5, i

    return {"softmax_renorm": softmax_renorm, "softmax_topk": softmax_topk, "topk_softmax": topk_softmax,
            "biased_topk_softmax": biased_topk_softmax, "grouped_sigmoid": grouped_sigmoid}[rule]


def main():
    spec = json.load(sys.stdin)
    dev = torch.device("cuda")
    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "results": []}
    for shape in spec["shapes"]:
        m, n, k_dim, k, copies = shape["tokens"], shape["experts"], shape["hidden"], shape["topk"], shape["copies"]
        g = torch.Generator(device=dev).manual_seed(7)
        x = torch.randn(m, k_dim, device=dev, generator=g).to(torch.bfloat16)
        ws = [torch.randn(n, k_dim, device=dev, generator=g).to(torch.bfloat16) / k_dim ** 0.5 for _ in range(copies)]
        bias = 0.3 * torch.randn(n, device=dev, generator=g)
        fn = rule_fn(shape["rule"], k, bias)

        def step():  # one router call per weight copy, as a model's layers would
            for w in ws:
                fn((x @ w.t()).float())

        eager = time_ms(step, spec["warmup"], spec["reps"]) / copies
        replay = graphed(step)
        if replay is None:
            raise RuntimeError(f"{shape['name']}: the PyTorch router did not capture in a CUDA graph")
        graph_ms = time_ms(replay, spec["warmup"], spec["reps"]) / copies
        out["results"].append({"name": shape["name"], "eager_us": eager * 1000.0, "graph_us": graph_ms * 1000.0})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
