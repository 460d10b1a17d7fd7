"""Anchor for `favlo bench chat --anchor`: llama.cpp (through the
llama-cpp-python package) on the same GGUF, same thread count, same prompt and
decode lengths, in the same run. Prints one table row like favlo's own.

usage: python3 chat_anchor.py MODEL.gguf THREADS PROMPT_TOKENS DECODE_TOKENS
"""
import sys
import time

try:
    import llama_cpp
except ImportError:
    print("llama.cpp   (not installed: pip install llama-cpp-python)")
    sys.exit(0)

path, threads, n_prompt, n_decode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
llm = llama_cpp.Llama(model_path=path, n_ctx=1024, n_threads=threads, n_threads_batch=threads,
                      n_batch=512, verbose=False, logits_all=False)
vocab = llm.n_vocab()
# Deterministic synthetic prompt from the ordinary vocabulary range, like favlo's.
state = 42
ids = []
for _ in range(n_prompt):
    state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    ids.append(256 + (state >> 33) % (min(vocab, 32000) - 256))


def run():
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    t1 = time.perf_counter()
    tok = int(llm.scores[llm.n_tokens - 1].argmax())
    for _ in range(n_decode):
        llm.eval([tok])
        tok = int(llm.scores[llm.n_tokens - 1].argmax())
    t2 = time.perf_counter()
    return n_prompt / (t1 - t0), n_decode / (t2 - t1)


run()  # warm-up
pre, dec = run()
print(f"{'llama.cpp':<10} {threads:>8} {pre:>14.1f} {dec:>14.1f} {'':>12}")
