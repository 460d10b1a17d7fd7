"""Anchor for `favlo bench chat --device cuda --anchor` on a Hugging Face
safetensors checkpoint: PyTorch `transformers` (bf16 on cuda:0, eager, its
default dynamic KV cache: what `model.generate` runs without compilation) on the
same directory, same prompt and decode lengths, in the same run. Greedy, one
sequence. Prints one table row like favlo's own.

usage: python3 chat_torch_anchor.py CHECKPOINT_DIR PROMPT_TOKENS DECODE_TOKENS
"""
import sys
import time

try:
    import torch
    from transformers import AutoModelForCausalLM
except ImportError:
    print("torch-bf16  (not installed: pip install torch transformers)")
    sys.exit(0)
if not torch.cuda.is_available():
    print("torch-bf16  (PyTorch sees no CUDA device)")
    sys.exit(0)

path, n_prompt, n_decode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to("cuda").eval()
vocab = model.config.vocab_size
# Deterministic synthetic prompt from the ordinary vocabulary range, like favlo's.
state = 42
ids = []
for _ in range(n_prompt):
    state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    ids.append(256 + (state >> 33) % (min(vocab, 32000) - 256))
prompt = torch.tensor([ids], device="cuda")


@torch.inference_mode()
def run():
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
    tok = out.logits[:, -1].argmax(-1, keepdim=True)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    past = out.past_key_values
    for _ in range(n_decode):
        out = model(input_ids=tok, past_key_values=past, use_cache=True)
        past = out.past_key_values
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return n_prompt / (t1 - t0), n_decode / (t2 - t1)


run()  # warm-up
pre, dec = max(run() for _ in range(2))
print(f"{'torch-bf16':<10} {1:>8} {pre:>14.1f} {dec:>14.1f} {'':>12}")
