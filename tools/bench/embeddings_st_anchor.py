"""Anchor for `favlo bench embeddings --anchor`: sentence-transformers
(PyTorch, CPU) on the same model folder and corpus, same thread count, batch
1, 8 and 32, plus the p50 latency of one short sentence. Prints rows like
favlo's own table.

usage: python3 embeddings_st_anchor.py MODEL_DIR CORPUS.txt THREADS
"""
import statistics
import sys
import time

try:
    import torch
    from sentence_transformers import SentenceTransformer
except ImportError:
    print("sentence-transformers  (not installed: pip install sentence-transformers)")
    sys.exit(0)

model_dir, corpus_path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(threads)
texts = [t for t in open(corpus_path, encoding="utf-8").read().split("\n") if t]
model = SentenceTransformer(model_dir, device="cpu")
model.encode(texts[:32], batch_size=32)  # warm-up
for batch in (1, 8, 32):
    t0 = time.perf_counter()
    model.encode(texts, batch_size=batch, show_progress_bar=False)
    dt = time.perf_counter() - t0
    print(f"{'sentence-transformers':<22} {batch:>6} {len(texts) / dt:>14.1f}")
lat = []
for _ in range(100):
    t0 = time.perf_counter()
    model.encode(["The cat sat on the warm windowsill."], show_progress_bar=False)
    lat.append((time.perf_counter() - t0) * 1000)
print(f"sentence-transformers p50 latency of one short sentence: {statistics.median(lat):.2f} ms")
