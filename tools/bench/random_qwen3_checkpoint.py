"""Writes a Hugging Face Qwen3 checkpoint with random weights (bf16 safetensors,
5 GB shards) for benchmarks of a full-size model without downloading one: the
real Qwen3-8B configuration by default (36 layers, hidden 4096, 32 q / 8 kv
heads of 128, intermediate 12288, vocab 151936), `transformers`' own random
initialization (normal, std = initializer_range 0.02; norms 1) from a fixed seed.
Needs torch and transformers; builds on cuda:0 when present (16 GB at bf16).

usage: python3 random_qwen3_checkpoint.py OUT_DIR [--layers N]
then:  favlo bench chat --dir OUT_DIR --device cuda --weights mxfp4 --prompt 2048 --decode 128 --anchor
"""
import argparse

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--layers", type=int, default=36)
a = ap.parse_args()
cfg = Qwen3Config(
    vocab_size=151936, hidden_size=4096, intermediate_size=12288,
    num_hidden_layers=a.layers, num_attention_heads=32, num_key_value_heads=8,
    head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
    rope_theta=1000000.0, tie_word_embeddings=False, attention_bias=False,
    bos_token_id=151643, eos_token_id=151645,
)
torch.manual_seed(0)
dev = "cuda" if torch.cuda.is_available() else "cpu"
with torch.device(dev):
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
model.save_pretrained(a.out, max_shard_size="5GB")
n = sum(p.numel() for p in model.parameters())
print(f"wrote {a.out}: {n / 1e9:.2f} B parameters, bf16")
