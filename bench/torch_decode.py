#!/usr/bin/env python3
"""The transformers baseline for `moeforge bench decode`: the built-in model's geometry (Qwen3-MoE,
random weights initialised on the GPU) with `layers` layers, bf16, transformers' own generate
(greedy, its default attention and experts implementations), one prompt per sequence of the batch.
Decode time = time(prompt + N new tokens) - time(prompt + 1 new token), CUDA-synchronised, median of
`reps`. Reads the workload as JSON on stdin, writes results as JSON on stdout."""
import json
import statistics
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, Qwen3MoeConfig


def timed_generate(model, ids, new_tokens):
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new_tokens,
                   min_new_tokens=new_tokens, eos_token_id=None, pad_token_id=0)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main():
    spec = json.load(sys.stdin)
    cfg = Qwen3MoeConfig(vocab_size=spec["vocab"], hidden_size=spec["hidden"], intermediate_size=spec["dense_intermediate"],
                         moe_intermediate_size=spec["intermediate"], num_hidden_layers=spec["layers"],
                         num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"], head_dim=spec["head_dim"],
                         num_experts=spec["experts"], num_experts_per_tok=spec["topk"], norm_topk_prob=True,
                         max_position_embeddings=4096, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    results = []
    for batch in spec["batches"]:
        ids = torch.tensor([spec["prompt_ids"]] * batch, device="cuda")
        new = spec["tokens"]
        with torch.no_grad():
            timed_generate(model, ids, 4)  # warm-up
            first = statistics.median(timed_generate(model, ids, 1) for _ in range(spec["reps"]))
            full = statistics.median(timed_generate(model, ids, new) for _ in range(spec["reps"]))
        step = (full - first) / (new - 1)
        results.append({"batch": batch, "layers": spec["layers"], "step_ms": step * 1e3,
                        "decode_tokens_per_s": batch / step, "prefill_and_first_token_ms": first * 1e3})
    print(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__, "results": results}))


if __name__ == "__main__":
    main()
