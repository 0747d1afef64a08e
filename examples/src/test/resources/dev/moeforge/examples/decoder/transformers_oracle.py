"""Greedy decoding of a Hugging Face model directory by transformers itself, the oracle of MoeForge's decoder.

usage: transformers_oracle.py MODEL_DIR PROMPT TOKENS LOGITS_OUT [RESAVE_DIR]
Prints JSON {"transformers", "device", "prompt_ids", "ids"} and writes each step's logits as raw
little-endian float32 [TOKENS, vocab] to LOGITS_OUT; with RESAVE_DIR also saves the model there with
save_pretrained (transformers' own spelling of config.json and tensor names). FP32 weights and activations, eager attention
and eager experts (the reference implementations), a manual loop over the KV cache.
"""
import json
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    model_dir, prompt, tokens, logits_out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    resave_dir = sys.argv[5] if len(sys.argv) > 5 else None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt_ids = tokenizer(prompt)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager",
                                                 experts_implementation="eager").to(device).eval()
    ids = []
    rows = []
    with torch.no_grad():
        out = model(torch.tensor([prompt_ids], device=device), use_cache=True)
        for _ in range(tokens):
            logits = out.logits[0, -1].float()
            rows.append(logits.cpu())
            nxt = int(torch.argmax(logits))
            ids.append(nxt)
            out = model(torch.tensor([[nxt]], device=device), past_key_values=out.past_key_values, use_cache=True)
    if resave_dir:
        model.save_pretrained(resave_dir)
    torch.stack(rows).numpy().astype("<f4").tofile(logits_out)
    print(json.dumps({"transformers": transformers.__version__, "device": device, "prompt_ids": prompt_ids, "ids": ids}))


if __name__ == "__main__":
    main()
